"""The classic scheduling policies a replay compares trainplane's against.

- ``fifo``: jobs start in submit order while the next one fits; the first that
  does not fit blocks everything behind it.
- ``easy``: EASY backfill (Slurm's default) in submit order. The first job that
  cannot start gets a reservation: the earliest time enough GPUs free up, from
  the running jobs' declared runtimes. Jobs behind it start if they fit now and
  either end (by their own declared runtime) before that time or use GPUs the
  reserved job will not need then. When a running job it waits for declared no
  runtime, nobody knows when its GPUs free up and nothing backfills.
- ``las``: Tiresias' discretized two-dimensional least attained service. A job's
  queue is set by the GPU-seconds it has held (GPUs x time, so large gangs
  climb faster); queues are served in order, FIFO within one, skipping jobs
  that do not fit; a running job that falls out of that order is preempted
  (paying the engine's checkpoint and restart cost). A job that has waited
  more than ``STARVE`` times as long as it has run (all runs together) is
  promoted to the top queue; counted from its last run only, jobs promoted
  after a short run preempt each other in a loop and none keeps a checkpoint.
  A job is not preempted before it has run ``LEASE_SECONDS`` and reached its
  first checkpoint: without that quantum jobs preempt each other after runs
  of seconds, each losing all of it and paying a restart.

``POLICIES`` names every policy a replay can run, trainplane's included.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from trainplane.simulation.engine import Decision, Policy, SimJob, View


class Fifo:
    name = "fifo"

    def decide(self, view: View) -> Decision:
        return Decision(start=[sim.id for sim in _in_order_while_fitting(view.queued, view.free)])


def _in_order_while_fitting(queued: Iterable[SimJob], free: int) -> list[SimJob]:
    started = []
    for sim in queued:
        if sim.gpus > free:
            break
        started.append(sim)
        free -= sim.gpus
    return started


def _expected_release(sim: SimJob, now: float) -> float:
    """When a running job gives its GPUs back by its declared runtime (inf: unknown)."""
    if sim.declared_runtime is None or sim.run_started is None:
        return math.inf
    return max(now, sim.run_started + sim.run_overhead + sim.declared_runtime)


class Easy:
    name = "easy"

    def decide(self, view: View) -> Decision:
        if view.free == 0:
            return Decision()  # nothing can start, and EASY never preempts
        head_start = _in_order_while_fitting(view.queued, view.free)
        free = view.free - sum(sim.gpus for sim in head_start)
        started = [sim.id for sim in head_start]
        if free == 0 or len(head_start) == len(view.queued):
            return Decision(start=started)
        head = view.queued[len(head_start)]
        releases = sorted(
            [(_expected_release(sim, view.now), sim.gpus) for sim in view.running]
            + [(view.now + (sim.declared_runtime or math.inf), sim.gpus) for sim in head_start]
        )
        shadow, available = math.inf, free
        for at, gpus in releases:
            if at == math.inf:
                break
            available += gpus
            if available >= head.gpus:
                shadow = at
                break
        extra = available - head.gpus if shadow != math.inf else 0
        for sim in view.queued[len(head_start) + 1 :]:
            if free == 0:
                break
            if sim.gpus > free:
                continue
            ends_in_time = (
                sim.declared_runtime is not None and view.now + sim.declared_runtime <= shadow
            )
            if not ends_in_time:
                if sim.gpus > extra:
                    continue
                extra -= sim.gpus
            started.append(sim.id)
            free -= sim.gpus
        return Decision(start=started)


def _submitted(sim: SimJob) -> tuple[float, str]:
    return sim.job.submit, sim.job.id


# Tiresias' queue thresholds, in attained GPU-hours, and its starvation knob.
LAS_THRESHOLDS_GPU_HOURS = (1.0, 10.0)
STARVE = 2.0
LEASE_SECONDS = 600.0
_EPSILON = 1e-6


@dataclass
class Las:
    thresholds_gpu_hours: tuple[float, ...] = LAS_THRESHOLDS_GPU_HOURS
    starve: float = STARVE
    lease_seconds: float = LEASE_SECONDS
    name: str = "las"
    # Attained GPU-seconds at a job's latest promotion: its queue counts from there.
    _base: dict[str, float] = field(default_factory=dict)

    def _service(self, sim: SimJob) -> float:
        return sim.attained_gpu_seconds - self._base.get(sim.id, 0.0)

    def _level(self, sim: SimJob) -> int:
        service = self._service(sim) + _EPSILON
        return sum(1 for hours in self.thresholds_gpu_hours if service >= hours * 3600)

    def decide(self, view: View) -> Decision:
        now = view.now
        wake = math.inf
        # Each queue's jobs in submit order: the queued ones already are.
        queued: list[list[SimJob]] = [[] for _ in range(len(self.thresholds_gpu_hours) + 1)]
        running: list[list[SimJob]] = [[] for _ in queued]
        for sim in view.queued:
            if sim.preemptions:  # one that never ran has only its own service to go by
                due = sim.queued_since + self.starve * sim.attained_gpu_seconds / sim.gpus
                if due <= now:
                    self._base[sim.id] = sim.attained_gpu_seconds  # promoted to the top queue
                else:
                    wake = min(wake, due)
            queued[self._level(sim)].append(sim)
        capacity = view.gpus
        keep: set[str] = set()
        for sim in view.running:
            lease = max(self.lease_seconds, view.checkpoint_seconds + sim.run_overhead)
            started = sim.run_started if sim.run_started is not None else now
            leased_until = started + lease
            if leased_until > now:
                keep.add(sim.id)
                capacity -= sim.gpus
                wake = min(wake, leased_until)
            else:
                running[self._level(sim)].append(sim)
        for waiting, held in zip(queued, running, strict=True):
            for sim in heapq.merge(waiting, sorted(held, key=_submitted), key=_submitted):
                if capacity == 0:
                    break
                if sim.gpus <= capacity:
                    keep.add(sim.id)
                    capacity -= sim.gpus
        preempt = [sim.id for sim in view.running if sim.id not in keep]
        start = [sim.id for sim in view.queued if sim.id in keep]
        for sim in view.running:
            if sim.id in keep:
                wake = min(wake, self._next_demotion(sim, now))
        return Decision(start=start, preempt=preempt, wake_at=None if wake == math.inf else wake)

    def _next_demotion(self, sim: SimJob, now: float) -> float:
        service = self._service(sim)
        for hours in self.thresholds_gpu_hours:
            if service + _EPSILON < hours * 3600:
                return now + (hours * 3600 - service) / sim.gpus
        return math.inf


def _trainplane() -> Policy:
    from trainplane.simulation.trainplane_policy import TrainplanePolicy

    return TrainplanePolicy()


POLICIES: dict[str, Callable[[], Policy]] = {
    "trainplane": _trainplane,
    "fifo": Fifo,
    "easy": Easy,
    "las": Las,
}
