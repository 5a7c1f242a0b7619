"""Replays the Philly trace (../shared/traces/philly.csv, 82,247 jobs over 109
days) on a simulated cluster, through trainplane's placement and fair-share
code (gang admission, EASY backfill, fair share across the trace's virtual
clusters as projects) and through plain FIFO, in one run.

    .venv/bin/python benchmarks/trace_replay.py [--nodes 64] [--gpus-per-node 8]
        [--days N] [--estimate-factor 2]

Target: trainplane's mean job completion time at least 30% below FIFO's, with
no lower GPU utilization. The whole trace takes about 3 minutes.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

from trainplane.simulation.replay import POLICIES, replay
from trainplane.simulation.summary import summarize
from trainplane.simulation.trace import read_philly

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "philly.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--days", type=float, default=None, help="only the first N days")
    parser.add_argument(
        "--estimate-factor",
        type=float,
        default=2.0,
        help="declared max_runtime = duration x this (0: no estimates)",
    )
    args = parser.parse_args()
    gpus = args.nodes * args.gpus_per_node
    jobs = read_philly(args.trace, days=args.days)
    print(
        f"{len(jobs)} jobs on {args.nodes} x {args.gpus_per_node} = {gpus} GPUs; "
        f"max_runtime = duration x {args.estimate_factor:g}"
    )
    summaries = {}
    for policy in POLICIES:
        started = time.monotonic()
        runs = replay(
            jobs,
            policy=policy,
            gpus=gpus,
            gpus_per_node=args.gpus_per_node,
            estimate_factor=args.estimate_factor,
        )
        summaries[policy] = summarize(runs, gpus=gpus)
        print(f"  {policy}: replayed in {time.monotonic() - started:.0f} s")
    rows = [
        ("mean JCT (h)", "mean_jct_hours", "{:.2f}"),
        ("p99 JCT (h)", "p99_jct_hours", "{:.1f}"),
        ("mean queueing delay (h)", "mean_wait_hours", "{:.2f}"),
        ("makespan (days)", "makespan_days", "{:.2f}"),
        ("GPU utilization", "utilization", "{:.3f}"),
        ("fairness (Jain, project slowdowns)", "fairness", "{:.3f}"),
    ]
    ours, fifo = summaries["trainplane"], summaries["fifo"]
    print("\n| metric | trainplane | FIFO | trainplane / FIFO |\n|---|---|---|---|")
    for label, field, form in rows:
        a, b = getattr(ours, field), getattr(fifo, field)
        print(f"| {label} | {form.format(a)} | {form.format(b)} | {a / b:.3f} |")
    print("\nmean queueing delay by project (h), the 6 with most jobs:")
    counts = Counter(job.project for job in jobs)
    for project in sorted(counts, key=lambda p: -counts[p])[:6]:
        print(
            f"  {project} ({counts[project]} jobs): trainplane "
            f"{ours.project_wait_hours[project]:.2f}, FIFO {fifo.project_wait_hours[project]:.2f}"
        )
    drop = 1 - ours.mean_jct_hours / fifo.mean_jct_hours
    verdict = "met" if drop >= 0.30 and ours.utilization >= fifo.utilization - 1e-9 else "MISSED"
    print(
        f"\nmean JCT {drop:.0%} below FIFO's; utilization {ours.utilization:.3f} vs "
        f"{fifo.utilization:.3f}: target {verdict}"
    )


if __name__ == "__main__":
    main()
