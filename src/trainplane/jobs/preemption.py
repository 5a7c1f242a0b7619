"""Which running attempts a waiting high-priority job may stop (pure code).

Only a ``high`` job preempts, and only ``low`` jobs are preempted, of any
project. A victim must have run for at least the minimum runtime, so a job
that was just (re)started cannot be bounced again at once. For each waiting
high job, in queue order, every cluster that could hold it is considered:
the one where the fewest GPUs need to be freed wins, and there the youngest
attempts go first (they lose the least work since their last checkpoint).
Attempts already asked to stop for a job count toward that job: a pass never
stops more than the job needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainplane.jobs.placement import ClusterState, Demand, can_ever_hold
from trainplane.jobs.quotas import QuotaLedger
from trainplane.jobs.spec import Priority

PREEMPTOR_PRIORITY = Priority.high.value
VICTIM_PRIORITY = Priority.low.value


@dataclass(frozen=True)
class RunningAttempt:
    """A live attempt of a running job, as preemption sees it."""

    attempt_id: str
    job_id: str
    cluster_id: str
    gpus: int
    priority: int
    running_seconds: float  # since the attempt started running
    preempted_by: str | None = None  # set once it was asked to stop for a job


@dataclass(frozen=True)
class Preemption:
    preemptor: Demand
    cluster_id: str
    victims: tuple[RunningAttempt, ...]


def choose_preemptions(
    waiting: Sequence[Demand],
    clusters: Sequence[ClusterState],
    running: Sequence[RunningAttempt],
    *,
    min_runtime_seconds: float,
    quotas: QuotaLedger | None = None,
) -> list[Preemption]:
    """``waiting``: the queued high-priority jobs, in queue order."""
    free = {c.id: c.free for c in clusters if c.ready}
    coming: dict[str, dict[str, int]] = {}  # preemptor -> cluster -> GPUs being freed
    for attempt in running:
        if attempt.preempted_by is not None:
            by_cluster = coming.setdefault(attempt.preempted_by, {})
            by_cluster[attempt.cluster_id] = by_cluster.get(attempt.cluster_id, 0) + attempt.gpus
    eligible = sorted(
        (
            a
            for a in running
            if a.preempted_by is None
            and a.priority <= VICTIM_PRIORITY
            and a.running_seconds >= min_runtime_seconds
        ),
        key=lambda a: (a.running_seconds, a.attempt_id),
    )
    taken: set[str] = set()
    chosen: list[Preemption] = []
    for demand in waiting:
        if quotas is not None and quotas.blocks(demand.project_id, demand.gpus):
            continue  # it could not start even with the GPUs free
        candidates = [c for c in clusters if c.ready and can_ever_hold(c, demand)]
        best: tuple[int, str, ClusterState, list[RunningAttempt]] | None = None
        for cluster in candidates:
            have = free[cluster.id] + coming.get(demand.job_id, {}).get(cluster.id, 0)
            victims: list[RunningAttempt] = []
            for attempt in eligible:
                if have >= demand.gpus:
                    break
                if attempt.cluster_id == cluster.id and attempt.attempt_id not in taken:
                    victims.append(attempt)
                    have += attempt.gpus
            if have < demand.gpus:
                continue
            freed = sum(v.gpus for v in victims)
            if best is None or (freed, cluster.name) < (best[0], best[1]):
                best = (freed, cluster.name, cluster, victims)
        if best is None:
            continue
        freed, _, target, victims = best
        # What this job will use is spoken for; later jobs in the pass see the rest.
        gained = freed + coming.get(demand.job_id, {}).get(target.id, 0)
        free[target.id] = max(0, free[target.id] + gained - demand.gpus)
        if quotas is not None:
            quotas.take(demand.project_id, demand.gpus)
        if victims:
            taken.update(v.attempt_id for v in victims)
            chosen.append(Preemption(demand, target.id, tuple(victims)))
    return chosen
