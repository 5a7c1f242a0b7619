"""An event-driven replay of a trace on one simulated cluster.

At every instant where jobs arrive or finish, a scheduler pass runs:

- ``trainplane``: the queue in submit order, reordered by
  :func:`trainplane.jobs.fairshare.fair_order` (each trace project at weight
  1), then placed by :func:`trainplane.jobs.placement.plan`: gang admission
  with EASY backfill, reserving for the first job that cannot start, judged
  from the running jobs' declared ``max_runtime``. These are the functions
  the real scheduler calls, not copies of them.
- ``fifo``: jobs start in submit order while the next one fits; the first
  that does not fit blocks everything behind it.

The trace has no runtime estimates. A job's declared ``max_runtime`` is its
real duration times ``estimate_factor`` (users overestimate), or none at all
when the factor is 0, in which case backfill can only use GPUs that no
reservation needs.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from trainplane.jobs.fairshare import fair_order
from trainplane.jobs.placement import ClusterState, Demand, Release, plan
from trainplane.simulation.trace import TraceJob

POLICIES = ("trainplane", "fifo")


@dataclass(frozen=True)
class Run:
    job: TraceJob
    start: float
    end: float

    @property
    def wait(self) -> float:
        return self.start - self.job.submit

    @property
    def completion(self) -> float:
        return self.end - self.job.submit


def replay(
    jobs: Sequence[TraceJob],
    *,
    policy: str,
    gpus: int,
    gpus_per_node: int,
    estimate_factor: float = 2.0,
) -> list[Run]:
    """Every job's start and end; jobs larger than the cluster are left out."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}")
    fitting = [job for job in jobs if job.gpus <= gpus]
    demands = {
        job.id: Demand(
            job_id=job.id,
            gpus=job.gpus,
            max_runtime_seconds=(
                math.ceil(job.duration * estimate_factor) if estimate_factor > 0 else None
            ),
            project_id=job.project,
        )
        for job in fitting
    }
    by_id = {job.id: job for job in fitting}
    queue: list[TraceJob] = []  # in submit order
    running: dict[str, Run] = {}
    finishing: list[tuple[float, str]] = []  # (end, job id)
    in_use_by_project: dict[str, int] = defaultdict(int)
    used = 0
    runs: list[Run] = []
    arrivals = iter(fitting)
    upcoming = next(arrivals, None)

    while upcoming is not None or finishing or queue:
        now = min(
            upcoming.submit if upcoming is not None else math.inf,
            finishing[0][0] if finishing else math.inf,
        )
        if now == math.inf:
            raise RuntimeError(f"{len(queue)} jobs can never start")  # a bug, not the trace
        while finishing and finishing[0][0] <= now:
            _, job_id = heapq.heappop(finishing)
            run = running.pop(job_id)
            used -= run.job.gpus
            in_use_by_project[run.job.project] -= run.job.gpus
        while upcoming is not None and upcoming.submit <= now:
            queue.append(upcoming)
            upcoming = next(arrivals, None)
        if used >= gpus or not queue:
            continue  # nothing can start: no pass needed
        if policy == "fifo":
            started = _fifo(queue, gpus - used)
        else:
            started = _trainplane(
                queue, demands, running, in_use_by_project, now, gpus, gpus_per_node, used
            )
        if not started:
            continue
        chosen = set(started)
        queue = [job for job in queue if job.id not in chosen]
        for job_id in started:
            job = by_id[job_id]
            run = Run(job, now, now + job.duration)
            running[job_id] = run
            runs.append(run)
            heapq.heappush(finishing, (run.end, job_id))
            used += job.gpus
            in_use_by_project[job.project] += job.gpus
    return runs


def _fifo(queue: list[TraceJob], free: int) -> list[str]:
    started = []
    for job in queue:
        if job.gpus > free:
            break
        started.append(job.id)
        free -= job.gpus
    return started


def _trainplane(
    queue: list[TraceJob],
    demands: dict[str, Demand],
    running: dict[str, Run],
    in_use_by_project: dict[str, int],
    now: float,
    gpus: int,
    gpus_per_node: int,
    used: int,
) -> list[str]:
    releases = [
        Release(
            gpus=run.job.gpus,
            after_seconds=(
                max(0.0, run.start + demand.max_runtime_seconds - now)
                if (demand := demands[run.job.id]).max_runtime_seconds is not None
                else None
            ),
        )
        for run in running.values()
    ]
    cluster = ClusterState(
        id="sim",
        name="sim",
        accelerator="H100",
        gpus=gpus,
        gpus_per_node=gpus_per_node,
        in_use=used,
        releases=releases,
    )
    ordered = fair_order([demands[job.id] for job in queue], in_use_by_project, {})
    return [job_id for job_id, _ in plan(ordered, [cluster]).placements]
