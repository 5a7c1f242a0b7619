"""The one place a job's status changes, and the one place job events are written.

:func:`set_status` checks the transition table, updates the row only if its
status is still what the caller read (so two writers cannot both win), and adds
the ``job_events`` row in the caller's transaction: the change and its event
commit together or not at all.
"""

from __future__ import annotations

from sqlalchemy import case, func, insert, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from trainplane.db.base import utcnow
from trainplane.db.models import Job, JobEvent
from trainplane.errors import InvalidTransitionError, StaleStateError
from trainplane.jobs.states import TERMINAL_STATUSES, JobStatus, is_allowed

# The actor named on events the scheduler's own loops write (users' events name
# the user or token instead).
SCHEDULER_ACTOR = "scheduler"


def _write_event(session: Session, **values: object) -> JobEvent:
    # A plain INSERT rather than session.add(): events are write-once, and the
    # unit of work costs more than the statement on the submission path.
    session.execute(insert(JobEvent.__table__), values)
    return JobEvent(**values)


def record_submission(
    session: Session, job: Job, *, actor: str, reason: str | None = None
) -> JobEvent:
    """The first event of a job: it entered the queue (by default, "submitted by <actor>")."""
    return _write_event(
        session,
        job_id=job.id,
        created_at=job.created_at,
        from_status=None,
        to_status=JobStatus.QUEUED.value,
        reason=reason or f"submitted by {actor}",
        message="",
        actor=actor,
    )


def record_note(
    session: Session, job_id: str, status: JobStatus, *, reason: str, actor: str
) -> None:
    """An event that changes no status (from and to are the job's current
    one): something happened to the job that its history must show, such as
    a preemption being asked for while it keeps running."""
    _write_event(
        session,
        job_id=job_id,
        created_at=utcnow(),
        from_status=status.value,
        to_status=status.value,
        reason=reason,
        message="",
        actor=actor,
    )


def set_status(
    session: Session,
    job: Job,
    target: JobStatus,
    *,
    reason: str,
    message: str = "",
    actor: str = "",
) -> JobEvent:
    current = JobStatus(job.status)
    if not is_allowed(current, target, job.kind):
        raise InvalidTransitionError(f"job {job.id} cannot go from {current} to {target}")
    now = utcnow()
    values: dict[str, object] = {"status": target.value, "reason": reason, "updated_at": now}
    if target is JobStatus.RUNNING and job.started_at is None:
        values["started_at"] = now
    if target in TERMINAL_STATUSES:
        values["finished_at"] = now
    result = session.execute(
        update(Job)
        .where(Job.id == job.id, Job.status == current.value)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        raise StaleStateError(f"job {job.id} changed while going from {current} to {target}")
    for key, value in values.items():
        # Mirror the UPDATE on the loaded object without marking it dirty (which
        # would make the next flush write an unconditional second UPDATE).
        set_committed_value(job, key, value)
    return _write_event(
        session,
        job_id=job.id,
        created_at=now,
        from_status=current.value,
        to_status=target.value,
        reason=reason,
        message=message,
        actor=actor,
    )


def set_status_many(
    session: Session,
    reasons: dict[str, str],
    current: JobStatus,
    target: JobStatus,
    *,
    actor: str = "",
    sweeps: bool = False,
) -> set[str]:
    """:func:`set_status` for many jobs that all go from ``current`` to
    ``target``, each with its own reason, in one UPDATE and one INSERT. Returns
    the ids that moved; a job whose status changed meanwhile is left alone.
    ``sweeps``: the jobs are sweeps (their own transition table); the others
    among the ids are left alone too."""
    if not reasons:
        return set()
    kind = "sweep" if sweeps else "train"
    if not is_allowed(current, target, kind):
        raise InvalidTransitionError(f"{kind} jobs cannot go from {current} to {target}")
    now = utcnow()
    values: dict[str, object] = {
        "status": target.value,
        "reason": case(reasons, value=Job.id),
        "updated_at": now,
    }
    if target in TERMINAL_STATUSES:
        values["finished_at"] = now
    if target is JobStatus.RUNNING:
        values["started_at"] = func.coalesce(Job.started_at, now)
    moved = set(
        session.scalars(
            update(Job)
            .where(
                Job.id.in_(list(reasons)),
                Job.status == current.value,
                (Job.kind == "sweep") if sweeps else (Job.kind != "sweep"),
            )
            .values(**values)
            .returning(Job.id)
            .execution_options(synchronize_session=False)
        )
    )
    if moved:
        session.execute(
            insert(JobEvent.__table__),
            [
                {
                    "job_id": job_id,
                    "created_at": now,
                    "from_status": current.value,
                    "to_status": target.value,
                    "reason": reasons[job_id],
                    "message": "",
                    "actor": actor,
                }
                for job_id in sorted(moved)
            ],
        )
    return moved
