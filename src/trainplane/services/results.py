"""Results of function jobs: what the train function returned on rank 0 or
raised on some rank, reported by the attempt's runtime (attempt token) and
read back by users (``GET /v1/jobs/{id}/result``).

One result per attempt. A return replaces an exception reported earlier in the
same attempt (Ray Train restarted the workers in place and they then
finished); of several exceptions the first one reported stands, since the
ranks that fail after it usually fail because it did.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainplane.db.base import upsert_insert, utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import JobAttempt, JobResult
from trainplane.errors import ConflictError, NotFoundError
from trainplane.jobs.results import ResultReport
from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES
from trainplane.services.access import Caller
from trainplane.services.attempt_tokens import TokenKey, check_attempt_token
from trainplane.services.jobs import load_job

_LIVE = [s.value for s in LIVE_ATTEMPT_STATUSES]


@dataclass(frozen=True)
class ResultView:
    job_id: str
    attempt_id: str
    attempt: int
    outcome: str
    rank: int
    value: bytes | None
    value_bytes: int
    value_repr: str
    error_type: str | None
    error_message: str | None
    traceback: str | None
    created_at: datetime


def record_result(
    session: Session,
    token_key: TokenKey,
    *,
    job_id: str,
    attempt_id: str,
    token: str | None,
    report: ResultReport,
) -> bool:
    """True when the report is now the attempt's result."""
    check_attempt_token(token_key.get(session), attempt_id, token)
    value = report.value_bytes()
    row = {
        "attempt_id": attempt_id,
        "job_id": job_id,
        "outcome": report.outcome,
        "rank": report.rank,
        "value": value,
        "value_bytes": len(value) if value is not None else 0,
        "value_repr": report.value_repr,
        "error_type": report.error.type if report.error else None,
        "error_message": report.error.message if report.error else None,
        "traceback": report.error.traceback if report.error else None,
        "created_at": utcnow(),
    }
    with session.begin():
        # Locked, so that a report racing the attempt's end is in before it or refused.
        status = session.scalar(
            select(JobAttempt.status)
            .where(JobAttempt.id == attempt_id, JobAttempt.job_id == job_id)
            .with_for_update()
        )
        if status is None:
            raise NotFoundError(f"job '{job_id}' has no attempt '{attempt_id}'")
        if status not in _LIVE:
            raise ConflictError(f"attempt {attempt_id} ended ({status}); it reports no result")
        statement = upsert_insert(session, JobResult).values(row)
        if report.outcome == "returned":
            statement = statement.on_conflict_do_update(
                index_elements=[JobResult.attempt_id], set_=row
            )
        else:
            statement = statement.on_conflict_do_nothing(index_elements=[JobResult.attempt_id])
        inserted = session.execute(statement.returning(JobResult.attempt_id)).first()
    return inserted is not None


def job_result(session: Session, caller: Caller, job_id: str) -> ResultView:
    """The result of the job's latest attempt that reported one."""
    with read_only(session):
        load_job(session, caller, job_id)
        found = session.execute(
            select(JobResult, JobAttempt.number)
            .join(JobAttempt, JobAttempt.id == JobResult.attempt_id)
            .where(JobResult.job_id == job_id)
            .order_by(JobAttempt.number.desc())
            .limit(1)
        ).first()
    if found is None:
        raise NotFoundError(
            f"job '{job_id}' has no result: its train function has not returned or raised yet"
        )
    result, number = found
    return ResultView(
        job_id=job_id,
        attempt_id=result.attempt_id,
        attempt=number,
        outcome=result.outcome,
        rank=result.rank,
        value=result.value,
        value_bytes=result.value_bytes,
        value_repr=result.value_repr,
        error_type=result.error_type,
        error_message=result.error_message,
        traceback=result.traceback,
        created_at=result.created_at,
    )
