"""The queue as users see it: each queued job's position and why it waits,
computed when asked from the current capacity (stored reasons would go stale
every time any job starts or ends)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainplane.db.base import utcnow
from trainplane.db.models import Job
from trainplane.jobs.placement import Demand, wait_reason
from trainplane.jobs.states import JobStatus
from trainplane.services.clusters import cluster_states
from trainplane.services.placement import queue_order

RANKED_QUEUE_LENGTH = 1000


@dataclass(frozen=True)
class QueueView:
    position: int | None  # 1 = next in line; None: further back than RANKED_QUEUE_LENGTH
    reason: str


def queue_views(session: Session, jobs: Sequence[Any]) -> dict[str, QueueView]:
    """For the QUEUED ones among ``jobs`` (rows or Jobs with id, status, gpus,
    gpus_per_node, gpu_type). Call inside a unit of work."""
    queued = [j for j in jobs if j.status == JobStatus.QUEUED.value]
    if not queued:
        return {}
    # Rank the head of the queue only: an index walk of bounded length, however
    # long the queue. Jobs further back are "more than N ahead".
    head = session.scalars(
        select(Job.id)
        .where(Job.status == JobStatus.QUEUED.value)
        .order_by(*queue_order())
        .limit(RANKED_QUEUE_LENGTH)
    )
    positions = {job_id: index + 1 for index, job_id in enumerate(head)}
    clusters = cluster_states(session, utcnow())
    views = {}
    for job in queued:
        demand = Demand(job.id, job.gpus, job.gpus_per_node, job.gpu_type)
        position = positions.get(job.id)
        if position is None and len(positions) < RANKED_QUEUE_LENGTH:
            continue  # placed since the page was read
        ahead = RANKED_QUEUE_LENGTH if position is None else position - 1
        reason = wait_reason(demand, clusters, ahead, at_least=position is None)
        views[job.id] = QueueView(position, reason)
    return views
