"""The event-driven cluster simulator that every replayed policy runs in.

A pass runs at every arrival, every finish and every time a policy asked to be
woken at (each time once, however often asked; an arrival or finish with an
empty queue needs no pass). In a pass the policy sees the queued jobs (in submit order) and the
running ones, and answers which running jobs to preempt and which queued jobs
to start. The engine owns time and accounting, so that every policy pays the
same for what it does:

- GPUs are one pool of ``gpus`` (``gpus_per_node`` is told to policies that
  place by node).
- A preempted job keeps the work up to its last checkpoint (one every
  ``checkpoint_minutes`` of useful work in the run) and goes back to the queue;
  the rest of the run is lost.
- Every restart first pays ``restart_overhead_seconds`` (loading the
  checkpoint, rebuilding the gang) before useful work continues. The first
  start pays nothing: the trace's durations already hold a cold start.
- Attained service counts every GPU-second held, lost or not; lost
  GPU-seconds count the work thrown away and every restart overhead.

Jobs that need more GPUs than the cluster has are left out, as the real
scheduler refuses them.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from trainplane.simulation.trace import TraceJob


@dataclass
class SimJob:
    job: TraceJob  # id, submit, duration (s of work), gpus, project
    declared_runtime: float | None  # the max_runtime declared (s); None when not declared
    done: float = 0.0  # seconds of work kept (rolled back to the last checkpoint on preemption)
    attained_gpu_seconds: float = 0.0  # GPU-seconds held so far, all runs, lost work included
    run_started: float | None = None  # start of the current run, None while queued
    first_start: float | None = None
    queued_since: float = 0.0  # submit time, or the time of its last preemption
    waited: float = 0.0  # seconds queued so far, not counting the current queued stretch
    preemptions: int = 0
    lost_gpu_seconds: float = 0.0
    # Added beyond the contract's fields:
    finished: float | None = None  # when its work was all done
    last_run_seconds: float = 0.0  # length of its latest run that ended (Tiresias' starvation rule)
    run_overhead: float = 0.0  # restart overhead the current run pays before useful work
    attained_at_run_start: float = 0.0
    run_epoch: int = 0  # increments at every start, so stale finish events are ignored

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def gpus(self) -> int:
        return self.job.gpus

    @property
    def remaining(self) -> float:
        """Seconds of work still to do (from the last kept point)."""
        return self.job.duration - self.done

    @property
    def total_wait(self) -> float:
        return self.waited

    @property
    def jct(self) -> float:
        if self.finished is None:
            raise ValueError(f"{self.id} has not finished")
        return self.finished - self.job.submit


@dataclass(frozen=True)
class View:
    """What a policy sees at one pass."""

    now: float
    gpus: int
    gpus_per_node: int
    free: int  # GPUs not held by running jobs
    queued: Sequence[SimJob]  # in submit order
    running: Sequence[SimJob]
    # Added beyond the contract's fields: the replay's preemption cost model.
    checkpoint_seconds: float = 1800.0
    restart_overhead_seconds: float = 60.0


@dataclass
class Decision:
    start: list[str] = field(default_factory=list)  # job ids; must fit after the preemptions
    preempt: list[str] = field(default_factory=list)  # running job ids, applied BEFORE the starts
    wake_at: float | None = None  # another pass at this time even with no arrival or finish


class Policy(Protocol):
    name: str

    def decide(self, view: View) -> Decision: ...


def _order(sim: SimJob) -> tuple[float, str]:
    return sim.job.submit, sim.job.id


class _Cluster:
    """The state of one replay: queue, running jobs, the event heaps."""

    def __init__(
        self, gpus: int, checkpoint_seconds: float, restart_overhead_seconds: float
    ) -> None:
        self.gpus = gpus
        self.free = gpus
        self.checkpoint = checkpoint_seconds
        self.overhead = restart_overhead_seconds
        self.queued: list[SimJob] = []  # in submit order
        self.queued_by_id: dict[str, SimJob] = {}
        self.running: dict[str, SimJob] = {}
        self.finishing: list[tuple[float, int, str]] = []  # (end, run epoch, job id)
        self.wakes: list[float] = []
        self.wake_set: set[float] = set()
        self.finished: list[SimJob] = []

    def enqueue(self, sim: SimJob) -> None:
        insort(self.queued, sim, key=_order)
        self.queued_by_id[sim.id] = sim

    def start(self, sim: SimJob, now: float) -> None:
        del self.queued_by_id[sim.id]
        del self.queued[bisect_left(self.queued, _order(sim), key=_order)]
        sim.waited += now - sim.queued_since
        sim.run_started = now
        if sim.first_start is None:
            sim.first_start = now
            sim.run_overhead = 0.0
        else:
            sim.run_overhead = self.overhead
        sim.attained_at_run_start = sim.attained_gpu_seconds
        sim.run_epoch += 1
        self.running[sim.id] = sim
        self.free -= sim.gpus
        end = now + sim.run_overhead + sim.remaining
        heapq.heappush(self.finishing, (end, sim.run_epoch, sim.id))

    def _end_run(self, sim: SimJob, now: float) -> float:
        """Closes the current run's accounting; the seconds it ran."""
        assert sim.run_started is not None
        ran = now - sim.run_started
        sim.attained_gpu_seconds = sim.attained_at_run_start + ran * sim.gpus
        sim.last_run_seconds = ran
        sim.run_started = None
        del self.running[sim.id]
        self.free += sim.gpus
        return ran

    def finish(self, sim: SimJob, now: float) -> None:
        self._end_run(sim, now)
        sim.lost_gpu_seconds += sim.run_overhead * sim.gpus
        sim.done = sim.job.duration
        sim.finished = now
        self.finished.append(sim)

    def preempt(self, sim: SimJob, now: float) -> None:
        ran = self._end_run(sim, now)
        useful = min(max(0.0, ran - sim.run_overhead), sim.remaining)
        kept = math.floor(useful / self.checkpoint) * self.checkpoint if self.checkpoint else 0.0
        sim.done += kept
        sim.lost_gpu_seconds += (ran - kept) * sim.gpus
        sim.preemptions += 1
        sim.queued_since = now
        self.enqueue(sim)

    def wake(self, at: float) -> None:
        if at not in self.wake_set:
            self.wake_set.add(at)
            heapq.heappush(self.wakes, at)

    def next_event(self, upcoming: SimJob | None) -> float:
        return min(
            upcoming.job.submit if upcoming is not None else math.inf,
            self.finishing[0][0] if self.finishing else math.inf,
            self.wakes[0] if self.wakes else math.inf,
        )

    def settle(self, now: float) -> bool:
        """Finishes due by ``now``; wakes due by then are consumed (whether any was)."""
        woken = False
        while self.finishing and self.finishing[0][0] <= now:
            _, epoch, job_id = heapq.heappop(self.finishing)
            sim = self.running.get(job_id)
            if sim is not None and sim.run_epoch == epoch:
                self.finish(sim, now)
        while self.wakes and self.wakes[0] <= now:
            self.wake_set.discard(heapq.heappop(self.wakes))
            woken = True
        return woken


def simulate(
    jobs: Sequence[TraceJob],
    policy: Policy,
    *,
    gpus: int,
    gpus_per_node: int,
    estimate_factor: float,
    checkpoint_minutes: float = 30.0,
    restart_overhead_seconds: float = 60.0,
) -> list[SimJob]:
    """Replays ``jobs`` (in submit order) under ``policy``; the finished jobs,
    in the order they finished. A job's declared runtime is its duration times
    ``estimate_factor`` (none when the factor is 0)."""
    if checkpoint_minutes <= 0:
        raise ValueError("checkpoint_minutes must be positive")
    cluster = _Cluster(gpus, checkpoint_minutes * 60.0, restart_overhead_seconds)
    fitting = sorted((job for job in jobs if job.gpus <= gpus), key=lambda j: (j.submit, j.id))
    sims = [
        SimJob(
            job=job,
            declared_runtime=(
                math.ceil(job.duration * estimate_factor) if estimate_factor > 0 else None
            ),
            queued_since=job.submit,
        )
        for job in fitting
    ]
    arrivals = iter(sims)
    upcoming = next(arrivals, None)
    while upcoming is not None or cluster.running or cluster.queued:
        now = cluster.next_event(upcoming)
        if now == math.inf:
            raise RuntimeError(
                f"{policy.name}: {len(cluster.queued)} jobs queued and nothing will ever run"
            )
        woken = cluster.settle(now)
        while upcoming is not None and upcoming.job.submit <= now:
            cluster.enqueue(upcoming)
            upcoming = next(arrivals, None)
        if not cluster.queued and not woken:
            continue  # nothing to start; only a pass asked for may preempt
        for sim in cluster.running.values():
            if sim.run_started is not None:
                held = now - sim.run_started
                sim.attained_gpu_seconds = sim.attained_at_run_start + held * sim.gpus
        view = View(
            now=now,
            gpus=gpus,
            gpus_per_node=gpus_per_node,
            free=cluster.free,
            queued=cluster.queued,
            running=list(cluster.running.values()),
            checkpoint_seconds=cluster.checkpoint,
            restart_overhead_seconds=cluster.overhead,
        )
        decision = policy.decide(view)
        _apply(cluster, decision, now, policy.name)
        if decision.wake_at is not None and decision.wake_at > now:
            cluster.wake(decision.wake_at)
    return cluster.finished


def _apply(cluster: _Cluster, decision: Decision, now: float, name: str) -> None:
    for job_id in decision.preempt:
        sim = cluster.running.get(job_id)
        if sim is None:
            raise ValueError(f"{name} preempted {job_id}, which is not running")
        cluster.preempt(sim, now)
    if not decision.start:
        return
    starting = [cluster.queued_by_id.get(job_id) for job_id in decision.start]
    if None in starting or len(set(decision.start)) != len(starting):
        raise ValueError(f"{name} started jobs that are not queued (or twice): {decision.start}")
    if sum(sim.gpus for sim in starting if sim is not None) > cluster.free:
        raise ValueError(f"{name} started more GPUs than are free at {now}")
    for sim in starting:
        assert sim is not None
        cluster.start(sim, now)
