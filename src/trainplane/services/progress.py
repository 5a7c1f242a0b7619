"""Progress of attempts: what runtimes report (step, heartbeat, metric points)
and what users read back (the latest attempt's progress, the metric points).

A report is authenticated by the attempt's own token, not by a Caller: the
runtime holds no user credential, and the token only ever lets it write the
progress of its own attempt while that attempt is live.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row, case, insert, or_, select, update
from sqlalchemy.orm import Session

from trainplane.db.base import json_merge, utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import JobAttempt, JobMetric
from trainplane.errors import ConflictError, NotFoundError
from trainplane.jobs.preemption import PREEMPTED
from trainplane.jobs.progress import ProgressReport
from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES
from trainplane.services.access import Caller
from trainplane.services.attempt_tokens import TokenKey, check_attempt_token
from trainplane.services.jobs import load_job

_LIVE = [s.value for s in LIVE_ATTEMPT_STATUSES]
PROGRESS_COLUMNS = (
    JobAttempt.number,
    JobAttempt.progress_step,
    JobAttempt.total_steps,
    JobAttempt.last_heartbeat_at,
    JobAttempt.last_progress_at,
)


@dataclass(frozen=True)
class Progress:
    """Where an attempt stands, as its runtime last reported."""

    attempt: int
    step: int | None
    total_steps: int | None
    last_heartbeat_at: datetime | None
    last_progress_at: datetime | None

    @classmethod
    def of(cls, attempt: JobAttempt | Row[Any]) -> Progress | None:
        """From an attempt, or a row of PROGRESS_COLUMNS; None for an attempt
        that never reported (not started yet, or a plain script that does not
        report)."""
        if attempt.last_heartbeat_at is None:
            return None
        return cls(
            attempt=attempt.number,
            step=attempt.progress_step,
            total_steps=attempt.total_steps,
            last_heartbeat_at=attempt.last_heartbeat_at,
            last_progress_at=attempt.last_progress_at,
        )


@dataclass(frozen=True)
class StopRequest:
    """What the control plane asks of a live attempt in answer to a report:
    checkpoint now and stop (it was preempted)."""

    reason: str
    requested_at: datetime


def record_progress(
    session: Session,
    token_key: TokenKey,
    *,
    job_id: str,
    attempt_id: str,
    token: str | None,
    report: ProgressReport,
) -> StopRequest | None:
    """Every report is a heartbeat; its step counts as progress when it
    differs from the one before (or is the first): after workers restart from
    a checkpoint the step goes back, and redoing those steps is progress too.
    Returns the stop the attempt is asked for, if any."""
    # The token is checked before anything is looked up, so that only the
    # holder of an attempt's token learns whether that attempt exists.
    check_attempt_token(token_key.get(session), attempt_id, token)
    now = utcnow()
    values: dict[str, Any] = {"last_heartbeat_at": now}
    step = report.current_step
    if step is not None:
        values["progress_step"] = step
        # SET expressions see the row as it was, so this compares with the
        # previous step.
        values["last_progress_at"] = case(
            (or_(JobAttempt.progress_step.is_(None), JobAttempt.progress_step != step), now),
            else_=JobAttempt.last_progress_at,
        )
    if report.total_steps is not None:
        values["total_steps"] = report.total_steps
    latest = latest_values(report)
    if latest:
        values["latest_metrics"] = json_merge(JobAttempt.latest_metrics, latest)
    with session.begin():
        # One statement checks that the attempt is live and records the report,
        # so a report racing the attempt's end is either in before it or refused.
        row = session.execute(
            update(JobAttempt)
            .where(
                JobAttempt.id == attempt_id,
                JobAttempt.job_id == job_id,
                JobAttempt.status.in_(_LIVE),
            )
            .values(values)
            .returning(JobAttempt.number, JobAttempt.stop_reason, JobAttempt.stop_requested_at)
            .execution_options(synchronize_session=False)
        ).first()
        if row is None:
            _refuse(session, job_id, attempt_id)
        number = row.number
        if report.points:
            session.execute(
                insert(JobMetric),
                [
                    {
                        "job_id": job_id,
                        "attempt_id": attempt_id,
                        "attempt": number,
                        "step": point.step,
                        "recorded_at": datetime.fromtimestamp(point.time, UTC),
                        "values": point.metrics,
                    }
                    for point in report.points
                ],
            )
    if row.stop_reason == PREEMPTED:
        return StopRequest(reason=PREEMPTED, requested_at=row.stop_requested_at or utcnow())
    return None


def latest_values(report: ProgressReport) -> dict[str, float]:
    """The last value of each metric in the report's points (they are in the
    order the runtime recorded them)."""
    latest: dict[str, float] = {}
    for point in report.points:
        latest.update(point.metrics)
    return latest


def _refuse(session: Session, job_id: str, attempt_id: str) -> None:
    status = session.scalar(
        select(JobAttempt.status).where(JobAttempt.id == attempt_id, JobAttempt.job_id == job_id)
    )
    if status is None:
        raise NotFoundError(f"job '{job_id}' has no attempt '{attempt_id}'")
    raise ConflictError(f"attempt {attempt_id} ended ({status}); it reports no more progress")


@dataclass(frozen=True)
class MetricsPage:
    job_id: str
    progress: Progress | None  # of the job's latest attempt
    points: list[Row[Any]]  # id, attempt, step, recorded_at, values; oldest first
    next_cursor: str | None


def job_metrics(
    session: Session, caller: Caller, job_id: str, *, limit: int, after: int | None
) -> MetricsPage:
    with read_only(session):
        load_job(session, caller, job_id)
        latest = session.execute(
            select(*PROGRESS_COLUMNS)
            .where(JobAttempt.job_id == job_id)
            .order_by(JobAttempt.number.desc())
            .limit(1)
        ).first()
        query = select(
            JobMetric.id, JobMetric.attempt, JobMetric.step, JobMetric.recorded_at, JobMetric.values
        ).where(JobMetric.job_id == job_id)
        if after is not None:
            query = query.where(JobMetric.id > after)
        points = list(session.execute(query.order_by(JobMetric.id).limit(limit + 1)))
    more = len(points) > limit
    points = points[:limit]
    return MetricsPage(
        job_id=job_id,
        progress=Progress.of(latest) if latest is not None else None,
        points=points,
        next_cursor=str(points[-1].id) if more else None,
    )
