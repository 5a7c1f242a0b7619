"""Registered Ray clusters: registration, removal, health, and the capacity
snapshot that placement and wait reasons are computed from."""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Engine, and_, delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from trainplane.db.base import utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Cluster, Job, JobAttempt
from trainplane.errors import ConflictError, NotFoundError
from trainplane.ids import new_id
from trainplane.jobs.placement import ClusterState, Demand, Release, can_ever_hold
from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES, JobStatus
from trainplane.services import audit
from trainplane.services.access import Caller, Role

READY = "READY"
UNREACHABLE = "UNREACHABLE"

_LIVE = [s.value for s in LIVE_ATTEMPT_STATUSES]


def awaiting_placement() -> ColumnElement[bool]:
    """Jobs that wait for GPUs: the QUEUED ones but sweeps, which are never
    placed (their trials are)."""
    return and_(Job.status == JobStatus.QUEUED.value, Job.kind != "sweep")


@dataclass(frozen=True)
class ClusterView:
    cluster: Cluster
    gpus_in_use: int
    live_attempts: int
    # Queued jobs this cluster could run (each may also fit elsewhere).
    queued_jobs: int = 0
    queued_gpus: int = 0


@dataclass(frozen=True)
class QueuedDemand:
    """All queued jobs, of every project: the demand the clusters share."""

    jobs: int
    gpus: int


def queued_demand(session: Session) -> list[tuple[Demand, int]]:
    """Queued jobs grouped by shape, with how many have each. Call inside a unit of work."""
    rows = session.execute(
        select(Job.gpus, Job.gpus_per_node, Job.gpu_type, func.count().label("jobs"))
        .where(awaiting_placement())
        .group_by(Job.gpus, Job.gpus_per_node, Job.gpu_type)
    )
    return [(Demand("queued", r.gpus, r.gpus_per_node, r.gpu_type), r.jobs) for r in rows]


def register_cluster(session: Session, caller: Caller, **fields: Any) -> Cluster:
    caller.require_everywhere(Role.ADMIN, "registering a cluster")
    now = utcnow()
    cluster = Cluster(id=new_id(), created_at=now, updated_at=now, status="UNKNOWN", **fields)
    try:
        with session.begin():
            session.add(cluster)
            audit.record(
                session,
                caller.subject,
                "cluster.register",
                target=fields["name"],
                address=fields.get("address"),
                gpus=fields.get("gpus"),
                price_per_gpu_hour=fields.get("price_per_gpu_hour"),
                autoscaling=fields.get("autoscaling"),
                start_timeout_seconds=fields.get("start_timeout_seconds"),
            )
    except IntegrityError:
        raise ConflictError(f"a cluster named '{fields['name']}' is already registered") from None
    _forget_capacity(session)
    return cluster


_AUDITED_FIELDS = (
    "address",
    "gpus",
    "price_per_gpu_hour",
    "autoscaling",
    "start_timeout_seconds",
)


def apply_cluster(session: Session, caller: Caller, **fields: Any) -> tuple[Cluster, bool]:
    """Register the cluster ``fields["name"]``, or bring it to ``fields``: the
    idempotent form of registration that deployments run on every rollout.
    Returns the cluster and whether it was created."""
    caller.require_everywhere(Role.ADMIN, "registering a cluster")
    now = utcnow()
    try:
        with session.begin():
            cluster = session.scalar(
                select(Cluster).where(Cluster.name == fields["name"]).with_for_update()
            )
            created = cluster is None
            if cluster is None:
                cluster = Cluster(id=new_id(), created_at=now, status="UNKNOWN")
                session.add(cluster)
                changed = dict(fields)
            else:
                changed = {k: v for k, v in fields.items() if getattr(cluster, k) != v}
            if changed:
                if "address" in changed:
                    # Another address is another cluster as far as health goes.
                    cluster.status, cluster.status_message, cluster.checked_at = "UNKNOWN", "", None
                for key, value in changed.items():
                    setattr(cluster, key, value)
                cluster.updated_at = now
                audit.record(
                    session,
                    caller.subject,
                    "cluster.register" if created else "cluster.update",
                    target=fields["name"],
                    **{k: changed[k] for k in _AUDITED_FIELDS if k in changed},
                )
    except IntegrityError:
        # Two concurrent first registrations: the other one won; apply again.
        return apply_cluster(session, caller, **fields)
    if changed:
        _forget_capacity(session)
    return cluster, created


def upsert_cluster(session: Session, **fields: Any) -> Cluster:
    """Register, or update in place (``trainplane up`` re-registers its local
    cluster at every start, at a new address)."""
    with session.begin():
        cluster = session.scalar(select(Cluster).where(Cluster.name == fields["name"]))
        if cluster is None:
            now = utcnow()
            cluster = Cluster(id=new_id(), created_at=now, updated_at=now, **fields)
            session.add(cluster)
        else:
            for key, value in fields.items():
                setattr(cluster, key, value)
            cluster.updated_at = utcnow()
        cluster.status, cluster.status_message, cluster.checked_at = "UNKNOWN", "", None
    _forget_capacity(session)
    return cluster


def live_usage(session: Session) -> dict[str | None, tuple[int, int]]:
    """(GPUs held, live attempts) per cluster id. Call inside a unit of work."""
    rows = session.execute(
        select(
            JobAttempt.cluster_id,
            func.sum(Job.gpus).label("gpus"),
            func.count().label("attempts"),
        )
        .join(Job, Job.id == JobAttempt.job_id)
        .where(JobAttempt.status.in_(_LIVE))
        .group_by(JobAttempt.cluster_id)
    )
    return {row.cluster_id: (int(row.gpus or 0), int(row.attempts)) for row in rows}


def list_clusters(session: Session, caller: Caller) -> list[ClusterView]:
    with read_only(session):
        usage = live_usage(session)
        clusters = list(session.scalars(select(Cluster).order_by(Cluster.name)))
        demand = queued_demand(session)
    views = []
    for c in clusters:
        gpus, attempts = usage.get(c.id, (0, 0))
        shape = ClusterState(c.id, c.name, c.accelerator, c.gpus, c.gpus_per_node)
        fitting = [(d, n) for d, n in demand if can_ever_hold(shape, d)]
        views.append(
            ClusterView(
                c,
                gpus,
                attempts,
                queued_jobs=sum(n for _, n in fitting),
                queued_gpus=sum(d.gpus * n for d, n in fitting),
            )
        )
    return views


def total_queued_demand(session: Session) -> QueuedDemand:
    with read_only(session):
        demand = queued_demand(session)
    return QueuedDemand(jobs=sum(n for _, n in demand), gpus=sum(d.gpus * n for d, n in demand))


def remove_cluster(session: Session, caller: Caller, name: str) -> None:
    """Refused while attempts run there: stop or cancel them first."""
    caller.require_everywhere(Role.ADMIN, "removing a cluster")
    with session.begin():
        cluster = session.scalar(select(Cluster).where(Cluster.name == name).with_for_update())
        if cluster is None:
            raise NotFoundError(f"no cluster named '{name}'")
        live = session.scalar(
            select(func.count())
            .select_from(JobAttempt)
            .where(JobAttempt.cluster_id == cluster.id, JobAttempt.status.in_(_LIVE))
        )
        if live:
            raise ConflictError(
                f"cluster '{name}' runs {live} attempt(s); cancel those jobs or wait for them"
            )
        session.execute(delete(Cluster).where(Cluster.id == cluster.id))
        audit.record(session, caller.subject, "cluster.remove", target=name)
    _forget_capacity(session)


def record_health(session: Session, cluster_id: str, *, ready: bool, message: str) -> None:
    with session.begin():
        session.execute(
            update(Cluster)
            .where(Cluster.id == cluster_id)
            .values(
                status=READY if ready else UNREACHABLE,
                status_message=message,
                checked_at=utcnow(),
            )
        )


def cluster_capacity(session: Session) -> list[ClusterState]:
    """What each registered cluster could hold, and whether it answers; no usage.
    Call inside a unit of work."""
    rows = session.execute(
        select(
            Cluster.id,
            Cluster.name,
            Cluster.accelerator,
            Cluster.gpus,
            Cluster.gpus_per_node,
            Cluster.status,
            Cluster.gpu_memory_gb,
        ).order_by(Cluster.name)
    )
    return [
        ClusterState(
            id=r.id,
            name=r.name,
            accelerator=r.accelerator,
            gpus=r.gpus,
            gpus_per_node=r.gpus_per_node,
            ready=r.status == READY,
            gpu_memory_gb=r.gpu_memory_gb,
        )
        for r in rows
    ]


# Registered capacity changes rarely and every submission checks against it, so
# each process keeps it for a couple of seconds. Only acceptance relies on the
# cached copy: a refusal is always re-checked against the database.
CAPACITY_CACHE_SECONDS = 2.0
_capacity: weakref.WeakKeyDictionary[Engine, tuple[float, list[ClusterState]]] = (
    weakref.WeakKeyDictionary()
)


def recent_capacity(session: Session) -> list[ClusterState]:
    """:func:`cluster_capacity`, at most CAPACITY_CACHE_SECONDS old."""
    engine = session.get_bind()
    cached = _capacity.get(engine)  # type: ignore[arg-type]
    if cached is not None and time.monotonic() - cached[0] < CAPACITY_CACHE_SECONDS:
        return cached[1]
    fresh = cluster_capacity(session)
    _capacity[engine] = (time.monotonic(), fresh)  # type: ignore[index]
    return fresh


def _forget_capacity(session: Session) -> None:
    _capacity.pop(session.get_bind(), None)  # type: ignore[call-overload]


def cluster_states(session: Session, now: datetime) -> list[ClusterState]:
    """Capacity as placement sees it: GPUs held by live attempts, and when each
    gives them back at the latest (its job's max_runtime). Call inside a unit of work."""
    states = {c.id: c for c in cluster_capacity(session)}
    live = session.execute(
        select(
            JobAttempt.cluster_id,
            JobAttempt.created_at,
            Job.gpus,
            Job.started_at,
            Job.max_runtime_seconds,
        )
        .join(Job, Job.id == JobAttempt.job_id)
        .where(JobAttempt.status.in_(_LIVE))
    )
    for row in live:
        state = states.get(row.cluster_id)
        if state is None:
            continue
        state.in_use += row.gpus
        after = None
        if row.max_runtime_seconds is not None:
            began = row.started_at or row.created_at
            after = max(0.0, row.max_runtime_seconds - (now - began).total_seconds())
        state.releases.append(Release(gpus=row.gpus, after_seconds=after))
    return list(states.values())
