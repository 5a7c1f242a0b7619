"""What each piece of per-step bookkeeping costs one rank, on 2 CPU ranks (gloo).

Times, many times over, each thing a training step of the runtime did or does
besides the training itself, and prints the median wall time per call (µs)
as a JSON line per piece (rank 0). Wall time, not CPU time: a collective
costs mostly waiting for the other rank. Run it on a quiet machine; the
breakdown in benchmarks/README.md ("Overhead") came from it.

    .venv/bin/python -m torch.distributed.run --nproc-per-node 2 benchmarks/step_costs.py
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from trainplane.runtime.reporting import ProgressReporter
from trainplane.runtime.step_log import StepLog
from trainplane.runtime.step_sync import StepSync

CALLS = 400


def timed(name: str, call: Callable[[int], object], calls: int = CALLS) -> None:
    """Median wall time of ``call(i)``; every rank calls it alike (collectives)."""
    dist.barrier()
    times = []
    for i in range(calls):
        started = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - started)
    if dist.get_rank() == 0:
        print(json.dumps({"piece": name, "median_us": round(statistics.median(times) * 1e6, 1)}))


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    loss = torch.tensor(2.5)
    work = Path(tempfile.mkdtemp(prefix="tp-step-costs-"))
    metrics = str(work / "metrics.jsonl") if rank == 0 else None

    def mean(_: int) -> float:  # ctx.mean(loss), as the examples called it every step
        tensor = torch.as_tensor(loss, dtype=torch.float64).clone()
        dist.all_reduce(tensor)
        return float((tensor / 2).item())

    def stop_flag(_: int) -> int:  # the stop check every report made under the service
        flag = torch.tensor([0], dtype=torch.int32)
        dist.broadcast(flag, src=0)
        return int(flag.item())

    reporter = ProgressReporter(url=None, job_id=None, attempt_id=None, token=None)
    reporter.metrics_file = metrics

    def record_now(i: int) -> None:  # rank 0's point written at once, as each report did
        reporter.record(i, {"loss": 2.5}, None)

    sync = StepSync(world_size=2, device=torch.device("cpu"), reporter=reporter)
    sync.next_meeting = 10**9  # between meetings
    step_log = StepLog(rank=rank, world_size=2, grad_accum=1)

    def report_between(i: int) -> None:  # what a report does now between meetings
        extra: dict[str, float] = {}
        step_log.add_throughput(extra, i, [])
        sync.add(i, {}, {"loss": loss}, extra)
        sync.meets_at(i)

    def meeting(i: int) -> None:  # one meeting after 50 steps: all-reduce, record, control
        for step in range(50):
            sync.add(i * 50 + step, {}, {"loss": loss}, {})
        sync.flush(None)
        sync.meet(i, stop=None, time_due=False)

    timed("ctx.mean every step (all-reduce + item)", mean)
    timed("stop check every report (broadcast + item)", stop_flag)
    timed("rank 0's point written per report", record_now)
    timed("report between meetings (now)", report_between)
    sync.pending.clear()
    timed("one meeting, 50 steps' points (now)", meeting, calls=40)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
