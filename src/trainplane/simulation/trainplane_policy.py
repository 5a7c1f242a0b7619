"""The ``trainplane`` policy in the replay engine: the real scheduler's rules,
called as the real scheduler calls them, with its default settings.

Each pass: the queue ranked by attained service with starvation promotion
(:func:`trainplane.jobs.service_queues.rank_queue`, each trace project at
weight 1), attained-service preemption
(:func:`trainplane.jobs.preemption.choose_service_preemptions`; every trace
job checkpoints), the preemptors offered the GPUs they freed first
(:func:`trainplane.jobs.placement.preemptors_first` as the placement service
does), then gang placement with backfill and the reservation pinned to
promoted jobs and to the long runs' head while they are owed their share of
the GPUs (:func:`trainplane.jobs.placement.plan`); the long runs' oldest
running jobs, up to the share, are shielded from lower levels
(:func:`trainplane.jobs.service_queues.shield_top_share`). The wait bound
(:mod:`trainplane.jobs.wait_bounds`) is learned as the real scheduler learns
it: job sizes from the jobs that finished (the GPU-seconds they held), each
job's first-come-first-served wait estimated the first time it is seen queued.
Entry levels (:mod:`trainplane.jobs.entry_levels`) are decided the first time
a job is seen, from its project's latest finished jobs of its width, as the
service decides them. One difference: the replay learns sizes from every job
that finished, the service from the latest 2,000 that succeeded in the bound's
window (it reads them at each estimate).
"""

from __future__ import annotations

import math
from collections import defaultdict

from trainplane.jobs.entry_levels import PeerHistory
from trainplane.jobs.placement import ClusterState, Demand, Release, plan, preemptors_first
from trainplane.jobs.preemption import RunningAttempt, choose_service_preemptions
from trainplane.jobs.service_queues import (
    HOUR,
    HeldJob,
    QueuedJob,
    ServiceRules,
    Standing,
    as_preemptor,
    rank_queue,
    service_level,
    share_in_use,
    shield_top_share,
    standing,
    starvation_bound_for,
    starved,
)
from trainplane.jobs.wait_bounds import (
    RecentWaits,
    SizeTally,
    expected_left,
    fifo_wait_seconds,
    wait_bound_seconds,
)
from trainplane.simulation.engine import Decision, SimJob, View

PRIORITY = 50  # every trace job has the default priority


def _demand(sim: SimJob) -> Demand:
    runtime = sim.declared_runtime
    return Demand(
        job_id=sim.id,
        gpus=sim.gpus,
        max_runtime_seconds=math.ceil(runtime) if runtime is not None else None,
        project_id=sim.job.project,
    )


class TrainplanePolicy:
    name = "trainplane"

    def __init__(self, rules: ServiceRules | None = None) -> None:
        self.rules = rules or ServiceRules()
        self._demands: dict[str, Demand] = {}
        # The wait bound (trainplane.jobs.wait_bounds), learned as the real
        # scheduler learns it: sizes from the jobs that finished, each job's
        # first-come-first-served wait estimated when it is first seen queued.
        self._sizes = SizeTally()
        self._fifo_waits = RecentWaits(
            self.rules.fifo_wait_window_seconds, self.rules.fifo_wait_quantile
        )
        self._estimated: set[str] = set()
        self._was_running: dict[str, SimJob] = {}
        # Entry levels (trainplane.jobs.entry_levels), decided when a job is
        # first seen from the outcomes of the jobs that finished before.
        self._peers = PeerHistory(self.rules)
        self._entry: dict[str, int] = {}

    def _demand(self, sim: SimJob) -> Demand:
        demand = self._demands.get(sim.id)
        if demand is None:
            demand = self._demands[sim.id] = _demand(sim)
        return demand

    def _learn(self, view: View) -> float | None:
        """Learns from the jobs that finished since the last pass, estimates
        the new ones' first-come-first-served waits, and answers the wait bound."""
        live = {sim.id for sim in view.running} | {sim.id for sim in view.queued}
        for job_id in [j for j in self._was_running if j not in live]:
            sim = self._was_running.pop(job_id)
            self._sizes.add(sim.job.project, sim.attained_gpu_seconds)
            self._peers.add(sim.job.project, sim.gpus, sim.attained_gpu_seconds)
            self._entry.pop(job_id, None)
        self._was_running.update((sim.id, sim) for sim in view.running)
        if any(sim.id not in self._estimated for sim in view.queued):
            sizes = self._sizes.sizes()

            def left(sim: SimJob) -> float:
                return expected_left(
                    sizes,
                    project_id=sim.job.project,
                    gpus=sim.gpus,
                    attained_gpu_seconds=sim.attained_gpu_seconds,
                )

            ahead = sum(left(sim) for sim in view.running)
            for sim in view.queued:  # in submit order: what is ahead of each
                if sim.id not in self._estimated:
                    self._estimated.add(sim.id)
                    self._entry[sim.id] = self._peers.entry_level(sim.job.project, sim.gpus)
                    self._fifo_waits.add(sim.job.submit, fifo_wait_seconds(ahead, view.gpus))
                ahead += left(sim)
        return wait_bound_seconds(self._fifo_waits.longest(view.now), self.rules)

    def _queued(self, sim: SimJob, now: float) -> QueuedJob:
        return QueuedJob(
            demand=self._demand(sim),
            priority=PRIORITY,
            submitted=sim.job.submit,
            attained_gpu_seconds=sim.attained_gpu_seconds,
            waited_seconds=sim.waited + (now - sim.queued_since),
            entry_level=self._entry.get(sim.id, 0),
        )

    def decide(self, view: View) -> Decision:
        rules, now = self.rules, view.now
        bound = self._learn(view)
        if view.free == 0:
            # Nothing can start without a preemption: decide that without
            # ranking the queue, which is most of a pass's cost.
            waits = {sim.id: sim.waited + now - sim.queued_since for sim in view.queued}
            best = max(
                (
                    as_preemptor(self._standing(sim, now, bound), waits[sim.id], rules)
                    for sim in view.queued
                ),
                default=None,
            )
            held = shield_top_share(self._held(view, bound), rules, view.gpus)
            if not self._may_preempt(view, best, held):
                # The ranking changes next when a job is promoted or may
                # preempt; when a promotion is already due, the victims'
                # next checkpoints wake the policy instead (_next_change).
                promotion_in = min(
                    (_bound(sim, rules, bound) - waits[sim.id] for sim in view.queued),
                    default=None,
                )
                patience = [rules.preempt_after_wait_seconds - w for w in waits.values()]
                change_in = min([t for t in patience if t > 0], default=promotion_in)
                if promotion_in is not None:
                    change_in = min(change_in, promotion_in)
                running = list(view.running)
                return Decision(wake_at=self._next_change(view, running, change_in, best, held))
        in_use: dict[str, int] = defaultdict(int)
        for sim in view.running:
            in_use[sim.job.project] += sim.gpus
        queued = [self._queued(sim, now) for sim in view.queued]
        running_jobs = self._held(view, bound)
        held = shield_top_share(running_jobs, rules, view.gpus)
        ranked = rank_queue(
            queued,
            rules,
            in_use=in_use,
            weights={},
            share_in_use_gpus=share_in_use(running_jobs, rules),
            capacity_gpus=view.gpus,
            wait_bound_seconds=bound,
        )
        running = {
            sim.id: RunningAttempt(
                attempt_id=sim.id,
                job_id=sim.id,
                cluster_id="sim",
                gpus=sim.gpus,
                priority=PRIORITY,
                running_seconds=now - (sim.run_started if sim.run_started is not None else now),
                attained_gpu_seconds=sim.attained_gpu_seconds,
                checkpoints=True,
                submitted=sim.job.submit,
                since_checkpoint_seconds=_since_checkpoint(sim, view),
            )
            for sim in view.running
        }
        cluster = _cluster(view, list(view.running))
        victims: set[str] = set()
        first: set[str] = set()
        if rules.preempt:
            for choice in choose_service_preemptions(
                ranked.order,
                ranked.standing,
                [cluster],
                list(running.values()),
                held,
                min_runtime_seconds=rules.min_run_seconds,
                loss_tolerance_seconds=rules.loss_tolerance_seconds,
            ):
                victims.update(v.job_id for v in choice.victims)
                first.add(choice.preemptor.job_id)
        staying = [sim for sim in view.running if sim.id not in victims]
        cluster = _cluster(view, staying)
        order = preemptors_first(ranked.order, first)
        placed = plan(order, [cluster], pinned=ranked.pinned).placements
        started = {job_id for job_id, _ in placed}
        # Learned from when they finish, even if no pass sees them running.
        self._was_running.update((sim.id, sim) for sim in view.queued if sim.id in started)
        wake = None
        if len(started) < len(view.queued):
            best = max(ranked.standing.values(), default=None)
            change_in = [
                t for t in (ranked.next_promotion_in, ranked.next_preemptor_in) if t is not None
            ]
            wake = self._next_change(view, staying, min(change_in, default=None), best, held)
        return Decision(start=[j for j, _ in placed], preempt=sorted(victims), wake_at=wake)

    def _may_preempt(self, view: View, best: Standing | None, held: dict[str, Standing]) -> bool:
        """Whether any queued job (``best``: the highest standing among them)
        could stop any running one now."""
        rules = self.rules
        if not rules.preempt or best is None:
            return False
        ripe = [sim for sim in view.running if _stoppable(sim, view, rules)]
        return bool(ripe) and best > min(held[sim.id] for sim in ripe)

    def _held(self, view: View, bound: float | None) -> list[HeldJob]:
        now = view.now
        return [
            HeldJob(
                job_id=sim.id,
                gpus=sim.gpus,
                submitted=sim.job.submit,
                attained_gpu_seconds=sim.attained_gpu_seconds,
                standing=self._standing(sim, now, bound),
                entry_level=self._entry.get(sim.id, 0),
            )
            for sim in view.running
        ]

    def _standing(self, sim: SimJob, now: float, bound: float | None) -> Standing:
        rules = self.rules
        waited = sim.waited + (now - sim.queued_since if sim.run_started is None else 0.0)
        return standing(
            PRIORITY,
            sim.attained_gpu_seconds,
            rules,
            submitted=sim.job.submit,
            starved=starved(sim.gpus, sim.attained_gpu_seconds, waited, rules, bound),
            entry_level=self._entry.get(sim.id, 0),
        )

    def _next_change(
        self,
        view: View,
        running: list[SimJob],
        promotion_in: float | None,
        best: Standing | None,
        held: dict[str, Standing],
    ) -> float | None:
        """When the ranking can next change with no arrival or finish: a
        queued job is promoted, a running job passes the minimum run or a
        threshold. ``best`` is the highest standing in the queue."""
        rules, now = self.rules, view.now
        times = [now + promotion_in] if promotion_in is not None else []
        if rules.preempt and best is not None:
            # A job that would lose too much now is a victim at its next checkpoint.
            for sim in running:
                if held[sim.id] < best:
                    times.append(now + view.checkpoint_seconds - _since_checkpoint(sim, view) + 1.0)
        if rules.preempt:
            for sim in running:
                started = sim.run_started if sim.run_started is not None else now
                if now - started < rules.min_run_seconds:
                    times.append(started + rules.min_run_seconds)
                level = service_level(sim.attained_gpu_seconds, rules, self._entry.get(sim.id, 0))
                if level < len(rules.thresholds_gpu_hours):
                    to_go = rules.thresholds_gpu_hours[level] * HOUR - sim.attained_gpu_seconds
                    times.append(now + to_go / sim.gpus)
        later = [t for t in times if t > now]
        return min(later) if later else None


def _bound(sim: SimJob, rules: ServiceRules, wait_bound: float | None) -> float:
    return starvation_bound_for(sim.gpus, sim.attained_gpu_seconds, rules, wait_bound)


def _since_checkpoint(sim: SimJob, view: View) -> float:
    """Seconds of work a running job would lose if stopped now (the engine
    keeps what it did up to its last checkpoint)."""
    started = sim.run_started if sim.run_started is not None else view.now
    useful = max(0.0, view.now - started - sim.run_overhead)
    return useful % view.checkpoint_seconds + min(view.now - started, sim.run_overhead)


def _stoppable(sim: SimJob, view: View, rules: ServiceRules) -> bool:
    started = sim.run_started if sim.run_started is not None else view.now
    return (
        view.now - started >= rules.min_run_seconds
        and _since_checkpoint(sim, view) <= rules.loss_tolerance_seconds
    )


def _cluster(view: View, running: list[SimJob]) -> ClusterState:
    releases = []
    for sim in running:
        started = sim.run_started if sim.run_started is not None else view.now
        after = (
            max(0.0, started + sim.run_overhead + sim.declared_runtime - view.now)
            if sim.declared_runtime is not None
            else None
        )
        releases.append(Release(gpus=sim.gpus, after_seconds=after))
    return ClusterState(
        id="sim",
        name="sim",
        accelerator="H100",
        gpus=view.gpus,
        gpus_per_node=view.gpus_per_node,
        in_use=sum(sim.gpus for sim in running),
        releases=releases,
    )
