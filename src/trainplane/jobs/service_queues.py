"""The queue order that needs no runtime estimates and starves no one (pure code).

Nobody declares how long a job runs, but the service it has already had is
known: the GPU-seconds it held, over all of its attempts. In the spirit of
Tiresias' discretized two-dimensional least-attained-service, jobs sit in
levels cut at a few thresholds of attained GPU-hours; a job that has had
less service goes first, so short jobs finish early. Job ``priority``
classes stay above the levels.

- Below the top level, fair share across projects
  (:func:`trainplane.jobs.fairshare.fair_order`) and then submit time decide
  within a level, and a queued job never stops a running one of its own
  level (a job that holds GPUs keeps them against its peers: swapping equals
  costs a checkpoint's work and a restart and gains nothing).
- The top level (the long and wide runs, where most GPU-hours are) is first
  come, first served: its jobs queue by submit time, and a queued one
  outranks the running ones submitted after it. Pure least-attained-service
  lets every newer job pass an old long one, and on a busy cluster its wait
  grows past what first come, first served would give it; ranked by submit
  time, no top-level job waits for work submitted after it except the short
  bursts of newer jobs at the lower levels.

A job that has waited (queued, all stretches together) longer than its bound,
``max(starve_after, starve_factor x its run time so far)``, is promoted: it
goes ahead of every level, in the order its waits crossed their bounds, and
holds the placement reservation until it starts (see
:func:`trainplane.jobs.placement.plan`'s ``pinned``). The default bound is
long (see :class:`ServiceRules`): the order above already keeps waits within
first come, first served's on the replayed traces; the bound is the backstop
for what it cannot see (a quota, a cluster shape that no backfill frees).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainplane.jobs.fairshare import fair_order
from trainplane.jobs.placement import Demand

HOUR = 3600.0


@dataclass(frozen=True)
class ServiceRules:
    """The scheduler's settings for this order (``trainplane.config`` has the
    same defaults, and :meth:`trainplane.config.Settings.service_rules` makes
    one from the server's settings). Levels are cut at 1, 10 and 100
    GPU-hours: a tenth of the first is a short debug run on one GPU; past
    ten a job is a real training run, past a hundred a long or wide one
    that queues first come, first served. The starvation bound (not scaled
    by the time a job has run: ``starve_factor`` 0) caps how long any job is
    passed over; once promoted, it is not preempted by attained service
    again. It is far longer than jobs wait on a cluster that keeps up, so it
    acts only on real starvation: on an overloaded cluster a bound of hours
    or days promotes nearly everyone and the order degrades to first come,
    first served (Philly's busiest month on 256 GPUs: a 48 h bound made the
    mean completion time 1.6x worse and the longest wait no shorter).

    ``loss_tolerance_seconds``: a running job is stopped for a preemption
    only while it would lose at most this much work since its last
    checkpoint; otherwise the preemptor waits for its next checkpoint. Jobs
    whose attempts checkpoint when asked to stop (trainplane's own runtime)
    lose nothing and are always eligible."""

    thresholds_gpu_hours: tuple[float, ...] = (1.0, 10.0, 100.0)
    starve_after_seconds: float = 60 * 24 * HOUR
    starve_factor: float = 0.0
    min_run_seconds: float = 600.0  # a running job is not preempted before this
    preempt: bool = True  # higher levels preempt lower ones (jobs that checkpoint)
    loss_tolerance_seconds: float = 300.0

    @property
    def top_level(self) -> int:
        return len(self.thresholds_gpu_hours)


@dataclass(frozen=True)
class QueuedJob:
    """A queued job as the order sees it; times in seconds on any one clock."""

    demand: Demand
    priority: int
    submitted: float
    attained_gpu_seconds: float = 0.0  # GPU-seconds held, all attempts
    waited_seconds: float = 0.0  # queued so far, all stretches


# A job's standing: (priority, promoted, -level, -submitted at the top level
# else 0). A queued job may preempt a running one only if its standing is
# higher: one of a higher priority, a promoted one, one of a lower level, or
# an older one at the top level.
Standing = tuple[int, int, int, float]


@dataclass(frozen=True)
class RankedQueue:
    order: list[Demand]
    promoted: frozenset[str]  # jobs past their starvation bound
    standing: dict[str, Standing]  # by job id
    next_promotion_in: float | None  # seconds until the next job is promoted


def service_level(attained_gpu_seconds: float, rules: ServiceRules) -> int:
    """0 for the least attained service; one more past each threshold."""
    return bisect.bisect_right(rules.thresholds_gpu_hours, attained_gpu_seconds / HOUR)


def standing(
    priority: int,
    attained_gpu_seconds: float,
    rules: ServiceRules,
    *,
    submitted: float,
    starved: bool = False,
) -> Standing:
    """A job's standing (``submitted`` on the clock of the queue's jobs). One
    that was promoted (it had waited past its bound) keeps that standing while
    it runs: otherwise newcomers would stop it again and again and its wait
    would only grow."""
    if starved:
        return (priority, 1, 0, 0.0)
    level = service_level(attained_gpu_seconds, rules)
    return (priority, 0, -level, -submitted if level == rules.top_level else 0.0)


def starved(
    gpus: int, attained_gpu_seconds: float, waited_seconds: float, rules: ServiceRules
) -> bool:
    """Whether a job has waited past its starvation bound."""
    return waited_seconds >= starvation_bound_for(gpus, attained_gpu_seconds, rules)


def starvation_bound_for(gpus: int, attained_gpu_seconds: float, rules: ServiceRules) -> float:
    """How long a job of ``gpus`` that has held ``attained_gpu_seconds`` may
    wait before it is promoted."""
    if not rules.starve_factor:
        return rules.starve_after_seconds
    ran = attained_gpu_seconds / max(gpus, 1)
    return max(rules.starve_after_seconds, rules.starve_factor * ran)


def starvation_bound(job: QueuedJob, rules: ServiceRules) -> float:
    """How long the job may wait before it is promoted."""
    return starvation_bound_for(job.demand.gpus, job.attained_gpu_seconds, rules)


def rank_queue(
    jobs: Sequence[QueuedJob],
    rules: ServiceRules,
    *,
    in_use: Mapping[str, int],
    weights: Mapping[str, float],
) -> RankedQueue:
    """The order jobs are offered GPUs in, and who is promoted."""
    promoted: list[tuple[float, float, str, Demand]] = []
    levels: dict[int, list[QueuedJob]] = {}
    standings: dict[str, Standing] = {}
    next_in: float | None = None
    for job in jobs:
        bound = starvation_bound(job, rules)
        job_id = job.demand.job_id
        if job.waited_seconds >= bound:
            # Overdue by more = crossed its bound earlier: that order is stable.
            overdue = job.waited_seconds - bound
            promoted.append((-overdue, job.submitted, job_id, job.demand))
            standings[job_id] = standing(
                job.priority, job.attained_gpu_seconds, rules, submitted=job.submitted, starved=True
            )
            continue
        left = bound - job.waited_seconds
        next_in = left if next_in is None else min(next_in, left)
        levels.setdefault(service_level(job.attained_gpu_seconds, rules), []).append(job)
        standings[job_id] = standing(
            job.priority, job.attained_gpu_seconds, rules, submitted=job.submitted
        )
    promoted.sort()
    order = [p[3] for p in promoted]
    used = dict(in_use)
    for demand in order:
        if demand.project_id is not None:
            used[demand.project_id] = used.get(demand.project_id, 0) + demand.gpus
    for level in sorted(levels):
        # Within a project, priority then submit time (as everywhere in the
        # scheduler); across projects, fair share.
        members = sorted(levels[level], key=lambda j: (-j.priority, j.submitted, j.demand.job_id))
        demands = [j.demand for j in members]
        # The top level is first come, first served (see the module's doc).
        ordered = demands if level == rules.top_level else fair_order(demands, used, weights)
        for demand in ordered:
            order.append(demand)
            if demand.project_id is not None:
                used[demand.project_id] = used.get(demand.project_id, 0) + demand.gpus
    return RankedQueue(
        order=order,
        promoted=frozenset(p[2] for p in promoted),
        standing=standings,
        next_promotion_in=next_in,
    )
