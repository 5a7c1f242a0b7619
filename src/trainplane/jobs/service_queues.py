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
- The long runs, the jobs at the ``share_levels`` highest levels (the top
  level and the one below it by default: past 10 GPU-hours), are owed a
  share of the GPUs (``top_share``, half by default). Their oldest running
  jobs, the top level's first, up to the share, stand as the lowest level
  does, so newer short jobs cannot stop them; while they hold less than
  their share, their oldest queued jobs (the top level's first) go before
  the other levels, and the first of them holds the reservation even with
  no known start (a wide gang would otherwise never see enough GPUs free at
  once). Without the share, every burst of short jobs stops the long ones
  again: on the whole Philly trace the long jobs were preempted up to a
  thousand times and the longest wait was nearly twice first come, first
  served's. The level below the top is in the share because where most of
  the GPU-hours are runs of 10 to 100 GPU-hours (single-GPU jobs of a few
  days), the top level alone holds too little for its share to protect
  them, and each newcomer stopped one of them again. Past what the share
  pulls forward, the long runs queue after the other levels as one lane,
  first come, first served: a newer run past 10 GPU-hours does not pass an
  older one past 100 (by attained service it would, and on a busy cluster
  the older runs' waits grew by the work of every newer run that climbed
  past 10 GPU-hours; the running jobs' standings are unchanged).
- A queued job may be made to wait before it stops anybody of its priority
  (``preempt_after_wait_seconds``, off by default), so that it takes GPUs
  that free up by themselves first: each stop costs a long run a restart
  and a new turn in the queue.
- A job whose project's earlier jobs of its GPU count mostly reached the
  top level goes there from the first threshold on instead of climbing
  (:mod:`trainplane.jobs.entry_levels`): it is likely long too, and its
  first hundred GPU-hours at the lower levels' standing would come out of
  the other long jobs' waits.

A job that has waited (queued, all stretches together) longer than its bound
is promoted: it goes ahead of every level, in the order its waits crossed
their bounds, and holds the placement reservation until it starts (see
:func:`trainplane.jobs.placement.plan`'s ``pinned``). The bound is the
longest wait first come, first served would have imposed on the jobs
submitted lately (``wait_bound_seconds``, from
:mod:`trainplane.jobs.wait_bounds`), so that passing long jobs over never
makes anyone wait much longer than first come, first served would make
someone wait; ``max(starve_after, starve_factor x its run time so far)`` is
the backstop while nothing is known yet (see :class:`ServiceRules`).
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
    passed over; a promoted job is not preempted by attained service while
    its wait stays past the bound (see :func:`standing`). The starvation
    bound is far longer than jobs wait on a cluster that keeps up, so it
    acts only on real starvation: on an overloaded cluster a bound of hours
    or days promotes nearly everyone and the order degrades to first come,
    first served (Philly's busiest month on 256 GPUs: a 48 h bound made the
    mean completion time 1.6x worse and the longest wait no shorter).

    ``loss_tolerance_seconds``: a running job is stopped for a preemption
    only while it would lose at most this much work since its last
    checkpoint; otherwise the preemptor waits for its next checkpoint. Jobs
    whose attempts checkpoint when asked to stop (trainplane's own runtime)
    lose nothing and are always eligible.

    ``top_share``: the fraction of the GPUs owed to the jobs at the
    ``share_levels`` highest levels (see the module's doc); 0 turns the
    share off. ``share_levels`` 1 owes it to the top level alone.

    ``fifo_wait_factor``: the wait bound is this times the longest wait first
    come, first served would have imposed on the jobs submitted in the last
    ``fifo_wait_window_seconds`` (:mod:`trainplane.jobs.wait_bounds`), and at
    least ``fifo_wait_floor_seconds``; 0 turns it off (the starvation bound
    alone remains). "Longest" is the ``fifo_wait_quantile`` of those waits:
    1 is the maximum, which one burst of estimates can set.

    ``entry_top_fraction``, ``entry_min_peers``, ``entry_peers``: a job
    skips from the lowest level to the top one, instead of climbing, when at least
    ``entry_min_peers`` of its project's latest ``entry_peers`` finished
    jobs of the same GPU count ran and at least this fraction of them
    reached the top level (:mod:`trainplane.jobs.entry_levels`); 0 turns
    it off.

    ``preempt_after_wait_seconds``: a queued job stops no running job of its
    own priority until it has waited this long (all stretches together), so
    that it takes GPUs that free up by themselves first; a promoted job, or
    one of a higher priority, stops others at once. 0, the default, preempts
    as soon as the order allows. On the whole Philly trace an hour halves the
    preemptions and the work they lose and lowers the p99, but the wait
    bound's estimate, which counts every queued newcomer at its project's
    mean size, then rose from 266 h to 400 h, and the longest wait from
    267 h to 318 h (``benchmarks/README.md``)."""

    thresholds_gpu_hours: tuple[float, ...] = (1.0, 10.0, 100.0)
    starve_after_seconds: float = 60 * 24 * HOUR
    starve_factor: float = 0.0
    min_run_seconds: float = 600.0  # a running job is not preempted before this
    preempt: bool = True  # higher levels preempt lower ones (jobs that checkpoint)
    loss_tolerance_seconds: float = 300.0
    top_share: float = 0.5
    share_levels: int = 2
    fifo_wait_factor: float = 1.0
    fifo_wait_window_seconds: float = 90 * 24 * HOUR
    fifo_wait_quantile: float = 0.999
    fifo_wait_floor_seconds: float = HOUR
    entry_top_fraction: float = 0.5
    entry_min_peers: int = 5
    entry_peers: int = 100
    preempt_after_wait_seconds: float = 0.0

    @property
    def top_level(self) -> int:
        return len(self.thresholds_gpu_hours)

    def in_share(self, level: int) -> bool:
        """Whether jobs of ``level`` are among those owed ``top_share``."""
        return level > self.top_level - self.share_levels


@dataclass(frozen=True)
class QueuedJob:
    """A queued job as the order sees it; times in seconds on any one clock."""

    demand: Demand
    priority: int
    submitted: float
    attained_gpu_seconds: float = 0.0  # GPU-seconds held, all attempts
    waited_seconds: float = 0.0  # queued so far, all stretches
    entry_level: int = 0  # the level it entered at (trainplane.jobs.entry_levels)


# A job's standing: (priority, promoted, -level, -submitted at the top level
# else 0). A queued job may preempt a running one only if its standing is
# higher: one of a higher priority, a promoted one, one of a lower level, or
# an older one at the top level.
Standing = tuple[int, int, int, float]


@dataclass(frozen=True)
class RankedQueue:
    order: list[Demand]
    promoted: frozenset[str]  # jobs past their starvation bound
    # Jobs whose placement reservation holds even with no known start: the
    # promoted ones and the head of the long runs while they are owed GPUs.
    pinned: frozenset[str]
    standing: dict[str, Standing]  # by job id
    next_promotion_in: float | None  # seconds until the next job is promoted
    wait_bound_seconds: float | None = None  # the bound this order applied
    # Seconds until a queued job has waited long enough to preempt (see
    # ServiceRules.preempt_after_wait_seconds).
    next_preemptor_in: float | None = None


def service_level(attained_gpu_seconds: float, rules: ServiceRules, entry_level: int = 0) -> int:
    """0 for the least attained service; one more past each threshold. Past
    the first threshold, never below the level the job entered at: the
    lowest level is everyone's, so that a job that fails at start or a quick
    test finishes fast whatever its project's other jobs did."""
    level = bisect.bisect_right(rules.thresholds_gpu_hours, attained_gpu_seconds / HOUR)
    return max(entry_level, level) if level else 0


def standing(
    priority: int,
    attained_gpu_seconds: float,
    rules: ServiceRules,
    *,
    submitted: float,
    starved: bool = False,
    entry_level: int = 0,
) -> Standing:
    """A job's standing (``submitted`` on the clock of the queue's jobs). One
    that was promoted (it had waited past its bound) keeps that standing while
    it runs: otherwise newcomers would stop it again and again and its wait
    would only grow. It keeps it only while its wait stays past the bound:
    the bound follows the queue, and a job promoted at a lower bound stands
    by attained service again once the bound rises past its wait. Keeping
    the promotion until the job finishes was measured (2026-12-07, in
    ``benchmarks/README.md``): it spared one long gang a dozen stops, but
    the synthetic mixes missed as many checks and the whole trace's longest
    wait rose by 2 h."""
    if starved:
        return (priority, 1, 0, 0.0)
    level = service_level(attained_gpu_seconds, rules, entry_level)
    return (priority, 0, -level, -submitted if level == rules.top_level else 0.0)


def as_preemptor(job_standing: Standing, waited_seconds: float, rules: ServiceRules) -> Standing:
    """A queued job's standing against the running jobs it could stop: until
    it has waited ``rules.preempt_after_wait_seconds``, and unless it was
    promoted, below every running job of its priority (it starts only on
    GPUs that free up); a job of a higher priority still stands above them."""
    priority, promoted, _, _ = job_standing
    if promoted or waited_seconds >= rules.preempt_after_wait_seconds:
        return job_standing
    return (priority, 0, -(rules.top_level + 1), 0.0)


def starved(
    gpus: int,
    attained_gpu_seconds: float,
    waited_seconds: float,
    rules: ServiceRules,
    wait_bound_seconds: float | None = None,
) -> bool:
    """Whether a job has waited past its bound."""
    bound = starvation_bound_for(gpus, attained_gpu_seconds, rules, wait_bound_seconds)
    return waited_seconds >= bound


def starvation_bound_for(
    gpus: int,
    attained_gpu_seconds: float,
    rules: ServiceRules,
    wait_bound_seconds: float | None = None,
) -> float:
    """How long a job of ``gpus`` that has held ``attained_gpu_seconds`` may
    wait before it is promoted: the wait bound when one is known (the same
    for every job), else the starvation bound."""
    bound = rules.starve_after_seconds
    if rules.starve_factor:
        ran = attained_gpu_seconds / max(gpus, 1)
        bound = max(bound, rules.starve_factor * ran)
    if wait_bound_seconds is not None:
        bound = min(bound, wait_bound_seconds)
    return bound


def rank_queue(
    jobs: Sequence[QueuedJob],
    rules: ServiceRules,
    *,
    in_use: Mapping[str, int],
    weights: Mapping[str, float],
    share_in_use_gpus: int = 0,
    capacity_gpus: int = 0,
    wait_bound_seconds: float | None = None,
) -> RankedQueue:
    """The order jobs are offered GPUs in, and who is promoted.
    ``share_in_use_gpus``: GPUs held by running jobs of the levels owed ``top_share``;
    ``capacity_gpus``: the GPUs of all ready clusters (0: no share is owed);
    ``wait_bound_seconds``: see :func:`trainplane.jobs.wait_bounds.wait_bound_seconds`."""
    promoted: list[tuple[float, float, str, Demand]] = []
    levels: dict[int, list[QueuedJob]] = {}
    standings: dict[str, Standing] = {}
    next_in: float | None = None
    next_preemptor: float | None = None
    for job in jobs:
        bound = starvation_bound_for(
            job.demand.gpus, job.attained_gpu_seconds, rules, wait_bound_seconds
        )
        job_id = job.demand.job_id
        if job.waited_seconds >= bound:
            # Overdue by more = crossed its bound earlier: that order is stable.
            overdue = job.waited_seconds - bound
            promoted.append((-overdue, job.submitted, job_id, job.demand))
            standings[job_id] = standing(
                job.priority,
                job.attained_gpu_seconds,
                rules,
                submitted=job.submitted,
                starved=True,
                entry_level=job.entry_level,
            )
            continue
        left = bound - job.waited_seconds
        next_in = left if next_in is None else min(next_in, left)
        level = service_level(job.attained_gpu_seconds, rules, job.entry_level)
        levels.setdefault(level, []).append(job)
        own = standing(
            job.priority,
            job.attained_gpu_seconds,
            rules,
            submitted=job.submitted,
            entry_level=job.entry_level,
        )
        standings[job_id] = as_preemptor(own, job.waited_seconds, rules)
        patience = rules.preempt_after_wait_seconds - job.waited_seconds
        if patience > 0:
            next_preemptor = patience if next_preemptor is None else min(next_preemptor, patience)
    promoted.sort()
    order = [p[3] for p in promoted]
    used = dict(in_use)
    for demand in order:
        if demand.project_id is not None:
            used[demand.project_id] = used.get(demand.project_id, 0) + demand.gpus
    # The long runs: the top level first, then the other share levels (the
    # share pass and the lane below each sort what they take).
    lane = levels.pop(rules.top_level, [])
    head = _pay_the_share(
        order,
        [lane, *(levels[lv] for lv in sorted(levels, reverse=True) if rules.in_share(lv))],
        rules.top_share * capacity_gpus - share_in_use_gpus,
    )
    for level in sorted(levels):
        if rules.in_share(level):
            lane.extend(levels[level])
            continue
        # Within a project, priority then submit time (as everywhere in the
        # scheduler); across projects, fair share.
        members = sorted(levels[level], key=_oldest_first)
        for demand in fair_order([j.demand for j in members], used, weights):
            order.append(demand)
            if demand.project_id is not None:
                used[demand.project_id] = used.get(demand.project_id, 0) + demand.gpus
    # The long runs, past what the share pulled forward, are first come,
    # first served as one lane (see the module's doc).
    order.extend(j.demand for j in sorted(lane, key=_oldest_first))
    promoted_ids = frozenset(p[2] for p in promoted)
    return RankedQueue(
        order=order,
        promoted=promoted_ids,
        pinned=promoted_ids | ({head} if head else set()),
        standing=standings,
        next_promotion_in=next_in,
        wait_bound_seconds=wait_bound_seconds,
        next_preemptor_in=next_preemptor,
    )


def _oldest_first(job: QueuedJob) -> tuple[int, float, str]:
    return (-job.priority, job.submitted, job.demand.job_id)


def _pay_the_share(order: list[Demand], lanes: list[list[QueuedJob]], owed: float) -> str | None:
    """While the share's levels are owed GPUs, their oldest queued jobs (the
    top level's first, as many as the debt covers, and always the first) go
    next in ``order`` and leave their lane; the first holds the reservation,
    as first come, first served would give it. Answers that first job's id."""
    if owed <= 0:
        return None
    head: str | None = None
    for lane in lanes:
        lane.sort(key=_oldest_first)
        while lane and (head is None or lane[0].demand.gpus <= owed):
            job = lane.pop(0)
            head = head or job.demand.job_id
            owed -= job.demand.gpus
            order.append(job.demand)
        if lane:
            break  # first come, first served: nobody passes a job that does not fit
    return head


@dataclass(frozen=True)
class HeldJob:
    """A running job as the long runs' share sees it."""

    job_id: str
    gpus: int
    submitted: float  # on the queue's clock
    attained_gpu_seconds: float
    standing: Standing  # its standing as a preemption victim
    entry_level: int = 0  # the level it entered at (trainplane.jobs.entry_levels)

    def level(self, rules: ServiceRules) -> int:
        return service_level(self.attained_gpu_seconds, rules, self.entry_level)


def share_in_use(held: Sequence[HeldJob], rules: ServiceRules) -> int:
    """GPUs held by running jobs of the levels owed ``top_share``."""
    return sum(job.gpus for job in held if rules.in_share(job.level(rules)))


def shield_top_share(
    held: Sequence[HeldJob], rules: ServiceRules, capacity_gpus: int
) -> dict[str, Standing]:
    """Running jobs' standings as preemption victims, with the share
    shielded: the oldest running jobs of the levels it is owed to (the top
    level's first), up to ``top_share`` of the GPUs, stand as the lowest
    level does, so that no job of a lower level stops them (a promoted job
    or a higher priority still may)."""
    standings = {job.job_id: job.standing for job in held}
    share = rules.top_share * capacity_gpus
    long_runs = sorted(
        (j for j in held if rules.in_share(j.level(rules))),
        key=lambda j: (-j.level(rules), j.submitted, j.job_id),
    )
    kept = 0
    for job in long_runs:
        if kept + job.gpus > share:
            break
        kept += job.gpus
        priority, promoted, _, _ = job.standing
        if not promoted:
            standings[job.job_id] = (priority, 0, 0, 0.0)
    return standings
