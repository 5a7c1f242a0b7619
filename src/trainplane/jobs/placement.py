"""Where queued jobs go: gang admission with EASY backfill (pure code).

The queue is in order (priority, then submit time). A job starts only when one
cluster can give it all of its GPUs at once. The first job that cannot start
gets a reservation: the earliest time enough GPUs free up on a cluster that can
hold it, judged from the running jobs' ``max_runtime``. Jobs behind it may
start only if they cannot delay it: on another cluster, or finishing (by their
own ``max_runtime``) before the reservation, or using GPUs the reserved job
will not need. When a running job has no ``max_runtime`` nobody can know when
its GPUs free up, so the reserved job's clusters take no backfill at all.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from trainplane.jobs.quotas import QuotaLedger


@dataclass(frozen=True)
class Demand:
    """What a queued job needs."""

    job_id: str
    gpus: int
    gpus_per_node: int | None = None
    gpu_type: str | None = None
    max_runtime_seconds: int | None = None
    project_id: str | None = None
    gpu_memory_gb: float | None = None  # its memory estimate per GPU, when known

    @property
    def shape(self) -> tuple[int, int | None, str | None, float | None]:
        return self.gpus, self.gpus_per_node, self.gpu_type, self.gpu_memory_gb

    def describe(self, *, memory: bool = False) -> str:
        kind = f" {self.gpu_type}" if self.gpu_type else ""
        per_node = f" ({self.gpus_per_node} per node)" if self.gpus_per_node else ""
        size = f" of {self.gpu_memory_gb:.0f}+ GB" if memory and self.gpu_memory_gb else ""
        return f"{self.gpus}{kind} GPU{'s' if self.gpus != 1 else ''}{size}{per_node}"


@dataclass(frozen=True)
class Release:
    """GPUs a running attempt gives back, at the latest ``after_seconds`` from now
    (its max_runtime); None when it has no max_runtime."""

    gpus: int
    after_seconds: float | None


@dataclass
class ClusterState:
    id: str
    name: str
    accelerator: str
    gpus: int
    gpus_per_node: int
    in_use: int = 0
    ready: bool = True
    releases: list[Release] = field(default_factory=list)
    gpu_memory_gb: float | None = None  # of one GPU, when the cluster says

    @property
    def free(self) -> int:
        return max(0, self.gpus - self.in_use)

    @property
    def nodes(self) -> int:
        return max(1, self.gpus // self.gpus_per_node)


def can_ever_hold(cluster: ClusterState, demand: Demand) -> bool:
    """Whether the cluster, empty, could run the job at all."""
    if demand.gpu_type and demand.gpu_type.lower() != cluster.accelerator.lower():
        return False
    if demand.gpus > cluster.gpus:
        return False
    if (
        demand.gpu_memory_gb
        and cluster.gpu_memory_gb
        and cluster.accelerator.lower() != "cpu"
        and demand.gpu_memory_gb > cluster.gpu_memory_gb
    ):
        return False  # its GPUs are too small for the job's memory estimate
    if demand.gpus_per_node:
        if demand.gpus_per_node > cluster.gpus_per_node:
            return False
        if demand.gpus // demand.gpus_per_node > cluster.nodes:
            return False
    return True


def never_fits_reason(demand: Demand, clusters: Sequence[ClusterState]) -> str | None:
    """Why no registered cluster can ever run the job; None if one can (or if no
    cluster is registered yet: the job waits for one)."""
    if not clusters or any(can_ever_hold(c, demand) for c in clusters):
        return None
    # The GPUs' size is worth saying only where it is what rules clusters out.
    sized = bool(demand.gpu_memory_gb) and any(
        c.gpu_memory_gb and c.accelerator.lower() != "cpu" for c in clusters
    )
    sizes = ", ".join(
        f"{c.name} has {c.gpus} {c.accelerator}"
        + (f" of {c.gpu_memory_gb:g} GB" if sized and c.gpu_memory_gb else "")
        + f" ({c.gpus_per_node} per node)"
        for c in clusters[:5]
    )
    return f"no cluster can ever hold {demand.describe(memory=sized)}: {sizes}"


@dataclass(frozen=True)
class Plan:
    placements: list[tuple[str, str]]  # (job id, cluster id), in queue order
    # The job holding the reservation, if one is blocked, and where.
    reserved_job: str | None = None
    reserved_clusters: tuple[str, ...] = ()


@dataclass
class _Reservation:
    job_id: str
    # cluster id -> (seconds until the job could start there, GPUs left over then)
    windows: dict[str, tuple[float, int]]


def plan(
    queue: Iterable[Demand],
    clusters: Sequence[ClusterState],
    quotas: QuotaLedger | None = None,
    *,
    pinned: Collection[str] | None = None,
) -> Plan:
    """Placements for ``queue`` (in queue order). A job its project's quota
    holds back is passed over: it neither starts nor reserves GPUs.

    ``pinned``: when given, only these jobs (those promoted for waiting too
    long) may hold a reservation whose start nobody can know; another job
    that cannot start gets one only where its start is known from
    ``max_runtime``s, and otherwise is passed over without holding back the
    jobs behind it. None: the first job that cannot start reserves."""
    free = {c.id: c.free for c in clusters}
    ready = [c for c in clusters if c.ready]
    candidates_by_shape: dict[tuple[int, int | None, str | None], list[ClusterState]] = {}
    placements: list[tuple[str, str]] = []
    reservation: _Reservation | None = None
    most_free = max((free[c.id] for c in ready), default=0)
    # Shapes refused a reservation since GPUs last changed hands: the answer
    # would be the same, and a long queue must not cost a pass per job.
    refused: set[tuple[int, int | None, str | None, float | None]] = set()

    def reserve(demand: Demand, candidates: list[ClusterState]) -> _Reservation | None:
        if demand.shape in refused and demand.job_id not in (pinned or ()):
            return None
        made = _reserve(demand, candidates, free, pinned)
        if made is None:
            refused.add(demand.shape)
        return made

    for demand in queue:
        if quotas is not None and quotas.blocks(demand.project_id, demand.gpus):
            continue
        candidates = candidates_by_shape.get(demand.shape)
        if candidates is None:
            candidates = [c for c in ready if can_ever_hold(c, demand)]
            candidates_by_shape[demand.shape] = candidates
        if most_free == 0:
            if pinned is not None and reservation is None and refused:
                break  # nothing can start, and who reserves changes nothing now
            if reservation is None and candidates:
                reservation = reserve(demand, candidates)
            if reservation is not None:
                break  # nothing can start anywhere; the rest only wait
            continue
        if not candidates or demand.gpus > most_free:
            if reservation is None and candidates:
                reservation = reserve(demand, candidates)
            continue
        fitting = [c for c in candidates if free[c.id] >= demand.gpus]
        # Best fit: the cluster left with the fewest free GPUs keeps big holes open.
        fitting.sort(key=lambda c: (free[c.id] - demand.gpus, c.name))
        chosen = None
        for cluster in fitting:
            if reservation is None or _backfill_ok(demand, cluster, reservation):
                chosen = cluster
                break
        if chosen is None:
            if reservation is None:
                reservation = reserve(demand, candidates)
            continue
        placements.append((demand.job_id, chosen.id))
        free[chosen.id] -= demand.gpus
        refused.clear()
        if quotas is not None:
            quotas.take(demand.project_id, demand.gpus)
        if reservation is not None and chosen.id in reservation.windows:
            start, spare = reservation.windows[chosen.id]
            if not _ends_before(demand, start):
                reservation.windows[chosen.id] = (start, spare - demand.gpus)
        most_free = max((free[c.id] for c in ready), default=0)

    return Plan(
        placements=placements,
        reserved_job=reservation.job_id if reservation else None,
        reserved_clusters=tuple(reservation.windows) if reservation else (),
    )


def preemptors_first(queue: list[Demand], first: set[str]) -> list[Demand]:
    """The GPUs a preemption frees go to the job it was for, whatever fair
    share would say: otherwise another project's job could take them and the
    preemptor would stop more jobs, or wait behind the very job it displaced."""
    if not first:
        return queue
    return [d for d in queue if d.job_id in first] + [d for d in queue if d.job_id not in first]


def _reserve(
    demand: Demand,
    candidates: list[ClusterState],
    free: dict[str, int],
    pinned: Collection[str] | None = None,
) -> _Reservation | None:
    windows: dict[str, tuple[float, int]] = {}
    for cluster in candidates:
        available = free[cluster.id]
        start = 0.0
        known = sorted(
            (r for r in cluster.releases if r.after_seconds is not None),
            key=lambda r: r.after_seconds or 0.0,
        )
        for release in known:
            if available >= demand.gpus:
                break
            available += release.gpus
            start = release.after_seconds or 0.0
        if available < demand.gpus:
            # Jobs without a max_runtime stand in the way: no one knows when
            # their GPUs come back, so nothing may backfill here.
            start, available = math.inf, demand.gpus
        windows[cluster.id] = (start, available - demand.gpus)
    unknown = all(start == math.inf for start, _ in windows.values())
    if pinned is not None and demand.job_id not in pinned and unknown:
        return None  # it would hold back everyone behind it for an unknown time
    return _Reservation(job_id=demand.job_id, windows=windows)


def _ends_before(demand: Demand, start: float) -> bool:
    return (
        start != math.inf
        and demand.max_runtime_seconds is not None
        and demand.max_runtime_seconds <= start
    )


def _backfill_ok(demand: Demand, cluster: ClusterState, reservation: _Reservation) -> bool:
    window = reservation.windows.get(cluster.id)
    if window is None:
        return True  # the reserved job cannot use this cluster
    start, spare = window
    return _ends_before(demand, start) or demand.gpus <= spare


def wait_reason(
    demand: Demand, clusters: Sequence[ClusterState], jobs_ahead: int, *, at_least: bool = False
) -> str:
    """Why a queued job is not running, in words, from the current cluster state.
    ``at_least``: the queue was ranked only that far, and more jobs are ahead."""
    if not clusters:
        return "waiting for a cluster: none is registered"
    holders = [c for c in clusters if can_ever_hold(c, demand)]
    if not holders:
        return never_fits_reason(demand, clusters) or "waiting for a cluster that can hold it"
    ready = [c for c in holders if c.ready]
    need = f"waiting for {demand.describe()}"
    if not ready:
        names = ", ".join(f"{c.name} is unreachable" for c in holders[:3])
        return f"{need}: {names}"
    if any(c.free >= demand.gpus for c in ready):
        more = "more than " if at_least else ""
        ahead = f"{more}{jobs_ahead} job{'s' if jobs_ahead != 1 else ''} ahead in the queue"
        return f"{need}: {ahead}" if jobs_ahead else f"{need}: about to be placed"
    best = sorted(ready, key=lambda c: -c.free)[:3]
    free = ", ".join(f"cluster {c.name} has {c.free} free" for c in best)
    return f"{need}: {free}"
