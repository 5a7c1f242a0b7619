"""Which running attempts a waiting high-priority job may stop (pure code).

Only a ``high`` job preempts, and only ``low`` jobs are preempted, of any
project. A victim must have run for at least the minimum runtime, so a job
that was just (re)started cannot be bounced again at once. For each waiting
high job, in queue order, every cluster that could hold it is considered:
the one where the fewest GPUs need to be freed wins, and there the youngest
attempts go first (they lose the least work since their last checkpoint).
Attempts already asked to stop for a job count toward that job: a pass never
stops more than the job needs.

Attained service (:mod:`trainplane.jobs.service_queues`) preempts the same
way, checkpoint first, with other victims: a queued job may stop running jobs
of a lower standing (less priority, or the same priority and more attained
service), the most attained first, only jobs that checkpoint (the others
would lose all their work) and only when that lets it start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from trainplane.jobs.placement import ClusterState, Demand, can_ever_hold
from trainplane.jobs.quotas import QuotaLedger
from trainplane.jobs.service_queues import Standing
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
    attained_gpu_seconds: float = 0.0  # GPU-seconds held, all attempts
    checkpoints: bool = False  # it saves checkpoints, so resuming loses little
    waited_seconds: float = 0.0  # queued so far, all stretches
    submitted: float = 0.0  # when the job was submitted, on the queue's clock
    entry_level: int = 0  # the service level it entered at (trainplane.jobs.entry_levels)
    # Work it would lose if stopped now: seconds since its last checkpoint.
    # None: it checkpoints when asked to stop (trainplane's runtime does), so
    # it loses nothing.
    since_checkpoint_seconds: float | None = None


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
    return _choose(waiting, clusters, running, lambda _: eligible, quotas)


def choose_service_preemptions(
    waiting: Sequence[Demand],
    standing: Mapping[str, Standing],
    clusters: Sequence[ClusterState],
    running: Sequence[RunningAttempt],
    running_standing: Mapping[str, Standing],
    *,
    min_runtime_seconds: float,
    loss_tolerance_seconds: float = float("inf"),
    quotas: QuotaLedger | None = None,
) -> list[Preemption]:
    """``waiting``: queued jobs in queue order;
    ``standing``/``running_standing``: by job id, as
    :func:`trainplane.jobs.service_queues.standing` says. A job that would
    lose more than ``loss_tolerance_seconds`` of work is not stopped now:
    its next checkpoint is a cheaper moment."""
    pool = sorted(
        (
            a
            for a in running
            if a.preempted_by is None
            and a.checkpoints
            and a.running_seconds >= min_runtime_seconds
            and (a.since_checkpoint_seconds or 0.0) <= loss_tolerance_seconds
        ),
        key=lambda a: (-a.attained_gpu_seconds, a.attempt_id),
    )
    if not pool:
        return []
    lowest = min(running_standing[a.job_id] for a in pool)
    # Only jobs standing above some victim can preempt at all.
    candidates = [d for d in waiting if standing[d.job_id] > lowest]
    by_standing: dict[Standing, list[RunningAttempt]] = {}

    def victims_for(demand: Demand) -> list[RunningAttempt]:
        mine = standing[demand.job_id]
        if mine not in by_standing:
            by_standing[mine] = [a for a in pool if running_standing[a.job_id] < mine]
        return by_standing[mine]

    return _choose(candidates, clusters, running, victims_for, quotas, len(pool))


def _choose(
    waiting: Sequence[Demand],
    clusters: Sequence[ClusterState],
    running: Sequence[RunningAttempt],
    eligible_for: Callable[[Demand], list[RunningAttempt]],
    quotas: QuotaLedger | None,
    pool_size: int | None = None,
) -> list[Preemption]:
    free = {c.id: c.free for c in clusters if c.ready}
    coming: dict[str, dict[str, int]] = {}  # preemptor -> cluster -> GPUs being freed
    for attempt in running:
        if attempt.preempted_by is not None:
            by_cluster = coming.setdefault(attempt.preempted_by, {})
            by_cluster[attempt.cluster_id] = by_cluster.get(attempt.cluster_id, 0) + attempt.gpus
    taken: set[str] = set()
    chosen: list[Preemption] = []
    for demand in waiting:
        if pool_size is not None and len(taken) >= pool_size and not any(free.values()):
            break  # every possible victim is taken and nothing is free
        if quotas is not None and quotas.blocks(demand.project_id, demand.gpus):
            continue  # it could not start even with the GPUs free
        candidates = [c for c in clusters if c.ready and can_ever_hold(c, demand)]
        eligible = eligible_for(demand)
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
