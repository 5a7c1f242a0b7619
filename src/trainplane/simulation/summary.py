"""The figures a replay is judged by."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from trainplane.simulation.engine import SimJob

LARGE_GANG_GPUS = 8  # jobs this large or larger count as large gangs

# The figures the replay's --json line carries for each policy.
JSON_FIELDS = (
    "mean_jct_hours",
    "p99_jct_hours",
    "utilization",
    "max_wait_hours",
    "mean_wait_hours",
    "fairness",
    "preemptions",
    "lost_gpu_hours",
)


@dataclass(frozen=True)
class Summary:
    jobs: int
    mean_jct_hours: float
    p99_jct_hours: float
    mean_wait_hours: float  # queued time, every queued stretch of a job counted
    max_wait_hours: float
    makespan_days: float
    utilization: float  # useful GPU-time (duration x GPUs) / (GPUs x makespan)
    # Jain's index over the projects' mean slowdowns (completion / run time):
    # 1 when every project is slowed alike, 1/n when one takes all the delay.
    fairness: float
    project_wait_hours: dict[str, float]
    preemptions: int  # all jobs together
    preempted_jobs: int  # jobs preempted at least once
    max_preemptions: int  # of any one job
    lost_gpu_hours: float  # work thrown away by preemptions, plus restart overheads
    large_gang_wait_hours: float | None  # mean wait of jobs of LARGE_GANG_GPUS or more

    def as_json(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in JSON_FIELDS}


def summarize(sims: Sequence[SimJob], *, gpus: int) -> Summary:
    """The figures of a replay's finished jobs on a cluster of ``gpus``."""
    completions = sorted(sim.jct for sim in sims)
    first = min(sim.job.submit for sim in sims)
    makespan = max(sim.jct + sim.job.submit for sim in sims) - first
    slowdowns: dict[str, list[float]] = defaultdict(list)
    waits: dict[str, list[float]] = defaultdict(list)
    for sim in sims:
        slowdowns[sim.job.project].append(sim.jct / max(sim.job.duration, 1.0))
        waits[sim.job.project].append(sim.waited)
    means = [statistics.fmean(values) for values in slowdowns.values()]
    large = [sim.waited for sim in sims if sim.gpus >= LARGE_GANG_GPUS]
    return Summary(
        jobs=len(sims),
        mean_jct_hours=statistics.fmean(completions) / 3600,
        p99_jct_hours=completions[min(len(completions) - 1, int(0.99 * len(completions)))] / 3600,
        mean_wait_hours=statistics.fmean(sim.waited for sim in sims) / 3600,
        max_wait_hours=max(sim.waited for sim in sims) / 3600,
        makespan_days=makespan / 86400,
        utilization=sum(sim.job.duration * sim.gpus for sim in sims) / (gpus * makespan),
        fairness=sum(means) ** 2 / (len(means) * sum(m * m for m in means)),
        project_wait_hours={p: statistics.fmean(w) / 3600 for p, w in waits.items()},
        preemptions=sum(sim.preemptions for sim in sims),
        preempted_jobs=sum(1 for sim in sims if sim.preemptions),
        max_preemptions=max(sim.preemptions for sim in sims),
        lost_gpu_hours=sum(sim.lost_gpu_seconds for sim in sims) / 3600,
        large_gang_wait_hours=statistics.fmean(large) / 3600 if large else None,
    )
