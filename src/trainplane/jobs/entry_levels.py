"""The level a job enters the attained-service order at, learned from its
project's earlier jobs of the same GPU count (pure code).

Levels rank jobs by the service they have had, so a job climbs them as it
runs, and a long one runs its first hundred GPU-hours at the standing of
the short jobs before anyone knows it is long. On a busy cluster that is as
much work again as all the short jobs' together, and the long jobs pay for
it with their waits: on the whole Philly trace the top level's jobs waited a
third longer than first come, first served would have made them wait, and
its p99 was past first come, first served's.

Teams repeat themselves: a project whose 8-GPU jobs mostly ran past the top
threshold is likely to do so again. Such a job's entry level is the top
level: it runs its first GPU-hour at the lowest level as every job does (so
a run that fails at start or a quick test of that project finishes fast),
and from there on it stands at the top level, first come, first served
with the long runs and owed their share of the GPUs, instead of climbing
through the levels between. A wrong guess costs a job of 1-100 GPU-hours
its place ahead of the long runs. The level is decided once, when the
scheduler first sees the job.

On the whole Philly trace (benchmarks/README.md) this took the p99
completion time from 279.2 h to 270.2 h, the mean from 8.9 h to 8.4 h and
the large gangs' mean wait from 105 h to 102 h. Entering at the top level
outright, without the first GPU-hour, gave the same p99 but a mean of
8.9 h and the large gangs' wait rose to 137 h: the projects' quick runs
waited with the long ones.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from trainplane.jobs.service_queues import HOUR, ServiceRules


def reached_top(attained_gpu_seconds: float, rules: ServiceRules) -> bool:
    """Whether a finished job's service (all its attempts) reached the top level."""
    return attained_gpu_seconds >= rules.thresholds_gpu_hours[-1] * HOUR


def entry_level(peers_reached_top: Iterable[bool], rules: ServiceRules) -> int:
    """The level a job enters at (past the first threshold; see
    :func:`trainplane.jobs.service_queues.service_level`), from its peers (the project's latest
    finished jobs of its GPU count, at most ``rules.entry_peers``, whether
    each reached the top level): the top level when at least
    ``entry_min_peers`` finished and at least ``entry_top_fraction`` of them
    reached it; else the lowest."""
    if rules.entry_top_fraction <= 0:
        return 0
    outcomes = list(peers_reached_top)[: rules.entry_peers]
    if len(outcomes) < rules.entry_min_peers:
        return 0
    if sum(outcomes) >= rules.entry_top_fraction * len(outcomes):
        return rules.top_level
    return 0


class PeerHistory:
    """Finished jobs' outcomes by (project, GPU count), the latest kept (the
    replay learns as its jobs finish; the service reads them from the
    database)."""

    def __init__(self, rules: ServiceRules) -> None:
        self.rules = rules
        self._outcomes: dict[tuple[str | None, int], deque[bool]] = {}

    def add(self, project_id: str | None, gpus: int, attained_gpu_seconds: float) -> None:
        kept = self._outcomes.get((project_id, gpus))
        if kept is None:
            kept = self._outcomes[(project_id, gpus)] = deque(maxlen=self.rules.entry_peers)
        kept.appendleft(reached_top(attained_gpu_seconds, self.rules))

    def entry_level(self, project_id: str | None, gpus: int) -> int:
        return entry_level(self._outcomes.get((project_id, gpus), ()), self.rules)


def entry_note(peers_reached_top: Iterable[bool], gpus: int, rules: ServiceRules) -> str:
    """Why a job entered at the top level, for its history."""
    outcomes = list(peers_reached_top)[: rules.entry_peers]
    top = rules.thresholds_gpu_hours[-1]
    return (
        f"past its first GPU-hour, queued with the long runs (the top service level, "
        f"first come, first served): "
        f"{sum(outcomes)} of its project's latest {len(outcomes)} finished {gpus}-GPU jobs "
        f"held {top:g} GPU-hours or more"
    )
