"""Replays a job trace on a simulated cluster under several scheduling
policies in one run: trainplane's own placement, fair-share and preemption
code, plain FIFO, EASY backfill and Tiresias-style least attained service.
The default trace is Philly (../shared/traces/philly.csv, 82,247 jobs over
109 days); any CSV with the same five columns
(``timestamp,duration,num_gpus,gpu_time,cluster``) works, and so do the
synthetic mixes of ``trainplane.simulation.synthetic``.

    .venv/bin/python benchmarks/trace_replay.py [--trace FILE | --synthetic NAME --seed S
        [--load-scale 1.3]]
        [--nodes 64] [--gpus-per-node 8] [--days N] [--estimate-factor 2]
        [--checkpoint-minutes 30] [--restart-overhead 60]
        [--policies trainplane,fifo,easy,las] [--json]

Preemption costs each preempted job the work since its last checkpoint and a
restart overhead. With ``--json`` the last stdout line is
``{"policies": {name: {mean_jct_hours, p99_jct_hours, utilization,
max_wait_hours, mean_wait_hours, fairness, preemptions, lost_gpu_hours}}}``.

Targets (printed at the end): trainplane's mean job completion time at most
half FIFO's and within 5% of the best other policy's, with a p99 completion
time, longest wait and GPU utilization no worse than FIFO's.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter
from pathlib import Path

from trainplane.simulation.engine import simulate
from trainplane.simulation.policies import POLICIES
from trainplane.simulation.summary import LARGE_GANG_GPUS, Summary, summarize
from trainplane.simulation.synthetic import MIXES, synthetic_trace
from trainplane.simulation.trace import TraceJob, read_philly

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "philly.csv"

ROWS = [
    ("mean JCT (h)", "mean_jct_hours", "{:.2f}"),
    ("p99 JCT (h)", "p99_jct_hours", "{:.1f}"),
    ("mean queueing delay (h)", "mean_wait_hours", "{:.2f}"),
    ("longest wait (h)", "max_wait_hours", "{:.1f}"),
    ("makespan (days)", "makespan_days", "{:.2f}"),
    ("GPU utilization", "utilization", "{:.3f}"),
    ("fairness (Jain, project slowdowns)", "fairness", "{:.3f}"),
    ("preemptions", "preemptions", "{:d}"),
    ("jobs preempted", "preempted_jobs", "{:d}"),
    ("GPU-hours lost to preemption", "lost_gpu_hours", "{:.1f}"),
]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--trace", type=Path, default=TRACE)
    source.add_argument("--synthetic", choices=sorted(MIXES), help="a synthetic mix, not a file")
    parser.add_argument("--seed", type=int, default=0, help="of the synthetic mix")
    parser.add_argument(
        "--load-scale",
        type=float,
        default=1.0,
        help="the synthetic mix's offered work times this (1.3: 30%% more jobs)",
    )
    parser.add_argument(
        "--nodes", type=int, default=None, help="64, or the synthetic mix's own cluster"
    )
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--days", type=float, default=None, help="only the first N days")
    parser.add_argument(
        "--estimate-factor",
        type=float,
        default=2.0,
        help="declared max_runtime = duration x this (0: no estimates)",
    )
    parser.add_argument("--checkpoint-minutes", type=float, default=30.0)
    parser.add_argument(
        "--restart-overhead", type=float, default=60.0, help="seconds every restart costs"
    )
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of figures")
    args = parser.parse_args()
    if not 0 < args.load_scale < math.inf:
        parser.error("--load-scale must be a positive number")
    if args.load_scale != 1.0 and not args.synthetic:
        parser.error("--load-scale applies to --synthetic mixes only")
    args.policies = [name.strip() for name in args.policies.split(",") if name.strip()]
    unknown = [name for name in args.policies if name not in POLICIES]
    if unknown or not args.policies:
        parser.error(f"--policies: unknown {unknown}; known: {', '.join(POLICIES)}")
    return args


def load(args: argparse.Namespace) -> tuple[list[TraceJob], str]:
    if args.synthetic:
        jobs = synthetic_trace(args.synthetic, seed=args.seed, load_scale=args.load_scale)
        if args.days is not None:
            jobs = [job for job in jobs if job.submit < args.days * 86400]
        scale = f", load x{args.load_scale:g}" if args.load_scale != 1.0 else ""
        return jobs, f"synthetic mix {args.synthetic} (seed {args.seed}{scale})"
    return read_philly(args.trace, days=args.days), args.trace.name


def print_tables(jobs: list[TraceJob], summaries: dict[str, Summary]) -> None:
    names = list(summaries)
    ratio = "trainplane" in summaries and "fifo" in summaries
    print(
        "\n| metric | "
        + " | ".join(names)
        + (" | trainplane / FIFO |" if ratio else " |")
        + "\n|---"
        + "|---" * (len(names) + ratio)
        + "|"
    )
    for label, field, form in ROWS:
        values = [getattr(summaries[name], field) for name in names]
        cells = " | ".join(form.format(value) for value in values)
        tail = ""
        if ratio:
            a, b = getattr(summaries["trainplane"], field), getattr(summaries["fifo"], field)
            tail = f" {a / b:.3f} |" if b else " - |"
        print(f"| {label} | {cells} |{tail}")
    print("\nmean queueing delay by project (h), the 6 with most jobs:")
    counts = Counter(job.project for job in jobs)
    for project in sorted(counts, key=lambda p: -counts[p])[:6]:
        waits = ", ".join(
            f"{name} {summaries[name].project_wait_hours.get(project, 0.0):.2f}" for name in names
        )
        print(f"  {project} ({counts[project]} jobs): {waits}")
    large = sum(1 for job in jobs if job.gpus >= LARGE_GANG_GPUS)
    gangs = ", ".join(
        f"{name} {s.large_gang_wait_hours:.2f}" if s.large_gang_wait_hours is not None else "-"
        for name, s in summaries.items()
    )
    print(f"\nlarge gangs ({large} jobs of {LARGE_GANG_GPUS}+ GPUs), mean wait (h): {gangs}")
    if ratio:
        print()
        for target, held in targets(summaries).items():
            print(f"target: {target}: {'met' if held else 'MISSED'}")


def targets(summaries: dict[str, Summary]) -> dict[str, bool]:
    """The scheduling targets, trainplane against the baselines of the same run."""
    ours, fifo = summaries["trainplane"], summaries["fifo"]
    others = [s.mean_jct_hours for name, s in summaries.items() if name != "trainplane"]
    return {
        "mean JCT <= 0.5 x FIFO's": ours.mean_jct_hours <= 0.5 * fifo.mean_jct_hours,
        "p99 JCT <= FIFO's": ours.p99_jct_hours <= fifo.p99_jct_hours,
        "utilization >= FIFO's": ours.utilization >= fifo.utilization - 0.005,
        "longest wait <= FIFO's": ours.max_wait_hours <= fifo.max_wait_hours,
        "mean JCT within 5% of the best other policy": ours.mean_jct_hours <= 1.05 * min(others),
    }


def main() -> None:
    args = parse_args()
    if args.nodes is None:
        args.nodes = MIXES[args.synthetic].nodes if args.synthetic else 64
    gpus = args.nodes * args.gpus_per_node
    jobs, source = load(args)
    print(
        f"{len(jobs)} jobs of {source} on {args.nodes} x {args.gpus_per_node} = {gpus} GPUs; "
        f"max_runtime = duration x {args.estimate_factor:g}; checkpoints every "
        f"{args.checkpoint_minutes:g} min, restarts cost {args.restart_overhead:g} s"
    )
    summaries = {}
    for name in args.policies:
        started = time.monotonic()
        finished = simulate(
            jobs,
            POLICIES[name](),
            gpus=gpus,
            gpus_per_node=args.gpus_per_node,
            estimate_factor=args.estimate_factor,
            checkpoint_minutes=args.checkpoint_minutes,
            restart_overhead_seconds=args.restart_overhead,
        )
        summaries[name] = summarize(finished, gpus=gpus)
        print(f"  {name}: replayed in {time.monotonic() - started:.0f} s", flush=True)
    print_tables(jobs, summaries)
    if args.json:
        print(json.dumps({"policies": {n: s.as_json() for n, s in summaries.items()}}))


if __name__ == "__main__":
    main()
