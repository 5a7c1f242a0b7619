"""How much of their restart budget jobs have used, read from their attempts
(the rules are jobs.retries'): failed attempts, lost attempts that had run, and the
restarts Ray Train made in place, as each attempt's runtime reported them."""

from __future__ import annotations

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.orm import Session

from trainplane.db.models import JobAttempt
from trainplane.jobs.attempts import StopReason
from trainplane.jobs.retries import RestartsUsed
from trainplane.jobs.states import AttemptStatus

# An attempt that failed (even before it was seen running: a runtime_env that
# could not be set up fails its Ray job with no exit code), or that was lost
# after it ran. A preempted attempt (STOPPED, or lost while trainplane was
# stopping it), a cancelled one, or one lost before it ran, uses none. This
# must count every attempt jobs.attempts.decide charges a restart to, or a job
# that fails that way would restart forever.
_USED_A_RESTART = or_(
    JobAttempt.status == AttemptStatus.FAILED.value,
    and_(
        JobAttempt.status == AttemptStatus.LOST.value,
        JobAttempt.started_at.is_not(None),
        or_(
            JobAttempt.stop_reason.is_(None),
            JobAttempt.stop_reason != StopReason.PREEMPTED.value,
        ),
    ),
)


def restarts_used(session: Session, job_ids: list[str]) -> dict[str, RestartsUsed]:
    """Per job of ``job_ids`` that has attempts, what they used so far."""
    if not job_ids:
        return {}
    rows = session.execute(
        select(
            JobAttempt.job_id,
            func.sum(case((_USED_A_RESTART, 1), else_=0)),
            func.sum(JobAttempt.in_place_restarts),
        )
        .where(JobAttempt.job_id.in_(job_ids))
        .group_by(JobAttempt.job_id)
    )
    return {
        job_id: RestartsUsed(failed_attempts=int(failed or 0), in_place=int(in_place or 0))
        for job_id, failed, in_place in rows
    }


def restarts_used_by(session: Session, job_id: str) -> RestartsUsed:
    return restarts_used(session, [job_id]).get(job_id, RestartsUsed())
