"""One placement pass: queued jobs become attempts on clusters.

Runs under the placement lock, in one transaction: read capacity and the queue,
plan (``trainplane.jobs.placement``), and for each placed job create a PENDING
attempt and move the job to STARTING. Launching the Ray jobs happens later,
outside any transaction (``trainplane.scheduler``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trainplane.db.locks import placement_section, try_placement_lock
from trainplane.db.models import Job, JobAttempt
from trainplane.errors import StaleStateError
from trainplane.ids import new_id
from trainplane.jobs.placement import Demand, plan
from trainplane.jobs.states import AttemptStatus, JobStatus
from trainplane.services.clusters import cluster_states
from trainplane.services.status import set_status

SCHEDULER_ACTOR = "scheduler"


@dataclass(frozen=True)
class PassResult:
    queued: int
    placed: list[tuple[str, str]]  # (job id, attempt id)
    skipped: bool = False  # another scheduler holds the lock


def queue_order() -> tuple:
    """The one definition of queue order: priority, then submit time."""
    return (Job.priority.desc(), Job.created_at, Job.id)


def load_queue(session: Session) -> list[Demand]:
    rows = session.execute(
        select(Job.id, Job.gpus, Job.gpus_per_node, Job.gpu_type, Job.max_runtime_seconds)
        .where(Job.status == JobStatus.QUEUED.value)
        .order_by(*queue_order())
    )
    return [
        Demand(
            job_id=r.id,
            gpus=r.gpus,
            gpus_per_node=r.gpus_per_node,
            gpu_type=r.gpu_type,
            max_runtime_seconds=r.max_runtime_seconds,
        )
        for r in rows
    ]


def place_queued_jobs(session: Session, now: datetime) -> PassResult:
    with placement_section(), session.begin():
        if not try_placement_lock(session):
            return PassResult(queued=0, placed=[], skipped=True)
        clusters = cluster_states(session, now)
        queue = load_queue(session)
        decisions = plan(queue, clusters)
        names = {c.id: c.name for c in clusters}
        placed = []
        for job_id, cluster_id in decisions.placements:
            attempt_id = _start_attempt(session, job_id, cluster_id, names[cluster_id], now)
            if attempt_id is not None:
                placed.append((job_id, attempt_id))
    return PassResult(queued=len(queue), placed=placed)


def _start_attempt(
    session: Session, job_id: str, cluster_id: str, cluster_name: str, now: datetime
) -> str | None:
    job = session.get_one(Job, job_id)
    previous = session.scalar(
        select(func.coalesce(func.max(JobAttempt.number), 0)).where(JobAttempt.job_id == job_id)
    )
    try:
        # Conditional on the job still being QUEUED: a cancel may have won.
        set_status(
            session,
            job,
            JobStatus.STARTING,
            reason=f"placed on cluster {cluster_name}; launching attempt {previous + 1}",
            actor=SCHEDULER_ACTOR,
        )
    except StaleStateError:
        return None
    attempt = JobAttempt(
        id=new_id(),
        job_id=job_id,
        number=previous + 1,
        cluster_id=cluster_id,
        status=AttemptStatus.PENDING.value,
        created_at=now,
        reason="",
        log_tail="",
    )
    session.add(attempt)
    return attempt.id
