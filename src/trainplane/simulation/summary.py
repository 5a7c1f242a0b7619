"""The figures a replay is judged by."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from trainplane.simulation.replay import Run


@dataclass(frozen=True)
class Summary:
    jobs: int
    mean_jct_hours: float
    p99_jct_hours: float
    mean_wait_hours: float
    makespan_days: float
    utilization: float  # GPU-time used / (GPUs x makespan)
    # Jain's index over the projects' mean slowdowns (completion / run time):
    # 1 when every project is slowed alike, 1/n when one takes all the delay.
    fairness: float
    project_wait_hours: dict[str, float]


def summarize(runs: Sequence[Run], *, gpus: int) -> Summary:
    completions = sorted(run.completion for run in runs)
    first = min(run.job.submit for run in runs)
    makespan = max(run.end for run in runs) - first
    slowdowns: dict[str, list[float]] = defaultdict(list)
    waits: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        slowdowns[run.job.project].append(run.completion / max(run.job.duration, 1.0))
        waits[run.job.project].append(run.wait)
    means = [statistics.fmean(values) for values in slowdowns.values()]
    return Summary(
        jobs=len(runs),
        mean_jct_hours=statistics.fmean(completions) / 3600,
        p99_jct_hours=completions[min(len(completions) - 1, int(0.99 * len(completions)))] / 3600,
        mean_wait_hours=statistics.fmean(run.wait for run in runs) / 3600,
        makespan_days=makespan / 86400,
        utilization=sum(run.job.duration * run.job.gpus for run in runs) / (gpus * makespan),
        fairness=sum(means) ** 2 / (len(means) * sum(m * m for m in means)),
        project_wait_hours={p: statistics.fmean(w) / 3600 for p, w in waits.items()},
    )
