"""The queue as users see it: each queued job's position and why it waits,
computed when asked from the current capacity (stored reasons would go stale
every time any job starts or ends).

Ranking the queue and reading capacity costs a few milliseconds, and job lists
are the most frequent read, so each process keeps the result for up to a
second (:class:`QueueSnapshot`). A job the snapshot cannot place (submitted or
reprioritised since) triggers a fresh one, so positions are never wrong, only
up to a second old.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from trainplane.db.base import utcnow
from trainplane.db.models import Job, JobAttempt
from trainplane.jobs.placement import ClusterState, Demand, wait_reason
from trainplane.jobs.quotas import ProjectQuota
from trainplane.jobs.service_queues import ServiceRules, starvation_bound_for
from trainplane.jobs.states import JobStatus
from trainplane.services.clusters import awaiting_placement, cluster_states
from trainplane.services.placement import queue_order, ranked_queue
from trainplane.services.quotas import project_quotas
from trainplane.services.wait_bounds import wait_bound

RANKED_QUEUE_LENGTH = 1000
SNAPSHOT_SECONDS = 1.0


@dataclass(frozen=True)
class QueueView:
    position: int | None  # 1 = next in line; None: further back than RANKED_QUEUE_LENGTH
    reason: str


@dataclass(frozen=True)
class QueueSnapshot:
    positions: dict[str, int]  # the head of the queue, up to RANKED_QUEUE_LENGTH jobs
    last: tuple[int, datetime, str] | None  # sort key of the last ranked job
    complete: bool  # the whole queue is ranked
    clusters: list[ClusterState]
    quotas: dict[str, ProjectQuota]  # by project id, the projects with a quota
    taken: float

    def covers(self, job: Any) -> bool:
        """Whether this snapshot can say where ``job`` stands: it ranked it, or
        ranked only the head of the queue and the job sorts behind that head.
        Anything else arrived (or was placed) after the snapshot was taken."""
        if job.id in self.positions:
            return True
        return not self.complete and self.last is not None and _behind(job, self.last)


def _behind(job: Any, key: tuple[int, datetime, str]) -> bool:
    priority, created_at, job_id = key
    if job.priority != priority:
        return job.priority < priority
    return (job.created_at, job.id) > (created_at, job_id)


def take_snapshot(session: Session, rules: ServiceRules) -> QueueSnapshot:
    queued = select(Job.id, Job.priority, Job.created_at).where(awaiting_placement())
    projects = session.scalars(
        select(Job.project_id).where(awaiting_placement()).distinct().limit(2)
    ).all()
    if len(projects) > 1 or not _plain_order(session, rules):
        # Projects compete (the order is fair share's), or attained service
        # or a long wait reorders jobs: the whole queue is ranked.
        return _fair_snapshot(session, rules)
    head = session.execute(queued.order_by(*queue_order()).limit(RANKED_QUEUE_LENGTH)).all()
    return QueueSnapshot(
        positions={row.id: index + 1 for index, row in enumerate(head)},
        last=(head[-1].priority, head[-1].created_at, head[-1].id) if head else None,
        complete=len(head) < RANKED_QUEUE_LENGTH,
        clusters=cluster_states(session, utcnow()),
        quotas={q.project_id: q for q in project_quotas(session, utcnow())},
        taken=time.monotonic(),
    )


def _plain_order(session: Session, rules: ServiceRules) -> bool:
    """Whether the queue's order is plain priority then submit time: no
    queued job has run yet (all have had no service) and none has waited
    long enough to be promoted, by the starvation bound or the wait bound."""
    now = utcnow()
    oldest = session.scalar(select(func.min(Job.created_at)).where(awaiting_placement()))
    if oldest is not None:
        # Plain order also needs that no queued job has run (below), so no
        # run time stretches the bound: a job of no service is asked about.
        bound = starvation_bound_for(1, 0.0, rules, wait_bound(session, now, rules))
        if (now - oldest).total_seconds() >= bound:
            return False
    ran = session.scalar(
        select(func.count())
        .select_from(JobAttempt)
        .join(Job, Job.id == JobAttempt.job_id)
        .where(awaiting_placement(), JobAttempt.started_at.is_not(None))
    )
    return not ran


def _fair_snapshot(session: Session, rules: ServiceRules) -> QueueSnapshot:
    now = utcnow()
    clusters = cluster_states(session, now)
    order = ranked_queue(session, now, rules, clusters).order
    return QueueSnapshot(
        positions={demand.job_id: index + 1 for index, demand in enumerate(order)},
        last=None,
        complete=True,
        clusters=clusters,
        quotas={q.project_id: q for q in project_quotas(session, utcnow())},
        taken=time.monotonic(),
    )


_snapshots: weakref.WeakKeyDictionary[Engine, tuple[ServiceRules, QueueSnapshot]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def _snapshot(session: Session, queued: Sequence[Any], rules: ServiceRules) -> QueueSnapshot:
    engine = session.get_bind()
    with _lock:
        kept = _snapshots.get(engine)  # type: ignore[arg-type]
    cached = kept[1] if kept is not None and kept[0] == rules else None
    fresh = cached is not None and time.monotonic() - cached.taken < SNAPSHOT_SECONDS
    if cached is not None and fresh and all(cached.covers(job) for job in queued):
        return cached
    snapshot = take_snapshot(session, rules)
    with _lock:
        _snapshots[engine] = (rules, snapshot)  # type: ignore[index]
    return snapshot


def queue_views(
    session: Session, jobs: Sequence[Any], rules: ServiceRules | None = None
) -> dict[str, QueueView]:
    """For the QUEUED ones among ``jobs`` (rows or Jobs with id, project_id,
    status, priority, created_at, gpus, gpus_per_node, gpu_type, gpu_memory_gb). Call inside
    a unit of work. ``rules``: the scheduler's order settings (their defaults
    when None)."""
    queued = [j for j in jobs if j.status == JobStatus.QUEUED.value and j.kind != "sweep"]
    if not queued:
        return {}
    snapshot = _snapshot(session, queued, rules or ServiceRules())
    views = {}
    for job in queued:
        position = snapshot.positions.get(job.id)
        if position is None and snapshot.complete:
            continue  # placed since the page was read
        quota = snapshot.quotas.get(job.project_id)
        held = quota.blocks(job.gpus) if quota is not None else None
        demand = Demand(
            job.id, job.gpus, job.gpus_per_node, job.gpu_type, gpu_memory_gb=job.gpu_memory_gb
        )
        ahead = RANKED_QUEUE_LENGTH if position is None else position - 1
        reason = held or wait_reason(demand, snapshot.clusters, ahead, at_least=position is None)
        views[job.id] = QueueView(position, reason)
    return views
