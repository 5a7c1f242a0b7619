"""Progress of attempts: what runtimes report (step, heartbeat, metric points)
and what users read back (the latest attempt's progress, the metric points).

A report is authenticated by the attempt's own token, not by a Caller: the
runtime holds no user credential, and the token only ever lets it write the
progress of its own attempt while that attempt is live.

The job's own code sends these, so they are bounded: per attempt a burst of
PROGRESS_BURST reports, then PROGRESS_PER_SECOND (a 429 with Retry-After
beyond; the runtime's reporter waits and sends again), and at most
MAX_METRIC_KEYS distinct metric names per report and per attempt. A report
that would take an attempt past that many names is refused whole (a 422 on
``metrics``), not cut: what was recorded stays exact, and the refusal reaches
the job's log. Names are at most 128 characters (``jobs.progress``).

A report may also carry the restarts Ray Train made in place (numbered per
attempt, so one sent twice counts once): they are kept on the attempt, where
the scheduler counts them against the job's restart budget (services.restarts),
and each gets a job event.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row, case, insert, or_, select, update
from sqlalchemy.orm import Session

from trainplane.db.base import json_merge, utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Job, JobAttempt, JobMetric
from trainplane.errors import ConflictError, InvalidInputError, NotFoundError, RateLimitedError
from trainplane.jobs.attempts import StopReason
from trainplane.jobs.progress import InPlaceRestart, ProgressReport
from trainplane.jobs.spec import load_spec
from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES, JobStatus
from trainplane.services.access import Caller
from trainplane.services.attempt_tokens import TokenKey, check_attempt_token
from trainplane.services.jobs import load_job
from trainplane.services.rate_limits import RateLimit
from trainplane.services.restarts import restarts_used_by
from trainplane.services.status import record_note
from trainplane.services.sweep_pruning import observe_report

_LIVE = [s.value for s in LIVE_ATTEMPT_STATUSES]
# A reporter sends every couple of seconds, and at each checkpoint.
PROGRESS_BURST = 20
PROGRESS_PER_SECOND = 2.0
MAX_METRIC_KEYS = 256
# The actor named on the job events of what an attempt's runtime reported.
RUNTIME_ACTOR = "runtime"


def progress_rate_limit() -> RateLimit:
    """The per-attempt limit of one API process."""
    return RateLimit(burst=PROGRESS_BURST, per_second=PROGRESS_PER_SECOND)


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
    checkpoint now and stop (it was preempted, or its sweep pruned it)."""

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
    rate_limit: RateLimit | None = None,
) -> StopRequest | None:
    """Every report is a heartbeat; its step counts as progress when it
    differs from the one before (or is the first): after workers restart from
    a checkpoint the step goes back, and redoing those steps is progress too.
    Returns the stop the attempt is asked for, if any."""
    # The token is checked before anything is looked up, so that only the
    # holder of an attempt's token learns whether that attempt exists.
    check_attempt_token(token_key.get(session), attempt_id, token)
    # After the token: nobody else can use up an attempt's allowance.
    wait = rate_limit.take(attempt_id) if rate_limit is not None else 0
    if wait:
        raise RateLimitedError(
            f"attempt {attempt_id} reports more often than {PROGRESS_PER_SECOND:g} times a "
            f"second (after a burst of {PROGRESS_BURST}); send again in {wait} s",
            retry_after_seconds=wait,
        )
    latest = latest_values(report)
    if len(latest) > MAX_METRIC_KEYS:
        raise InvalidInputError("metrics", _too_many_names(f"the report names {len(latest)}"))
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
    if latest:
        values["latest_metrics"] = json_merge(JobAttempt.latest_metrics, latest)
    with session.begin():
        # A sweep's trial is judged first: its sweep's row is locked before the
        # attempt's, in the order a sweep's cancel takes them. Refused below,
        # the report leaves nothing of this either.
        pruned = observe_report(session, job_id, attempt_id, report.points)
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
            .returning(
                JobAttempt.number,
                JobAttempt.stop_reason,
                JobAttempt.stop_requested_at,
                JobAttempt.latest_metrics,
                JobAttempt.in_place_restarts,
            )
            .execution_options(synchronize_session=False)
        ).first()
        if row is None:
            _refuse(session, job_id, attempt_id)
        if report.restarts:
            _record_restarts(session, job_id, attempt_id, row.in_place_restarts, report.restarts)
        names = len(row.latest_metrics or {})
        if names > MAX_METRIC_KEYS:  # raised in the transaction: nothing is kept
            raise InvalidInputError(
                "metrics", _too_many_names(f"the attempt would have {names} with this report")
            )
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
    if pruned is not None:
        return pruned
    if row.stop_reason in (StopReason.PREEMPTED, StopReason.PRUNED):
        # Asked before: asked again in every answer until the attempt stops.
        return StopRequest(
            reason=StopReason(row.stop_reason), requested_at=row.stop_requested_at or utcnow()
        )
    return None


def _record_restarts(
    session: Session,
    job_id: str,
    attempt_id: str,
    recorded: int,
    restarts: list[InPlaceRestart],
) -> None:
    """Keep the attempt's count of restarts in place (``recorded`` so far, in
    this transaction under the attempt's row lock) and give each new one a
    job event, numbered within the job's whole budget."""
    new = sorted({r.number: r for r in restarts if r.number > recorded}.values(), key=_number)
    if not new:
        return
    count = new[-1].number
    session.execute(
        update(JobAttempt)
        .where(JobAttempt.id == attempt_id)
        .values(in_place_restarts=count)
        .execution_options(synchronize_session=False)
    )
    status, spec = session.execute(select(Job.status, Job.spec).where(Job.id == job_id)).one()
    budget = load_spec(spec).retries.max_restarts
    # Restarts used in all now, the last of these included.
    used = restarts_used_by(session, job_id).before_next_attempt
    for restart in new:
        which = used - (count - restart.number)
        cause = f": {restart.error}" if restart.error else ""
        record_note(
            session,
            job_id,
            JobStatus(status),
            reason=f"{restart.described} (restart {which} of {budget}){cause}",
            actor=RUNTIME_ACTOR,
        )


def _number(restart: InPlaceRestart) -> int:
    return restart.number


def latest_values(report: ProgressReport) -> dict[str, float]:
    """The last value of each metric in the report's points (they are in the
    order the runtime recorded them)."""
    latest: dict[str, float] = {}
    for point in report.points:
        latest.update(point.metrics)
    return latest


def _too_many_names(count: str) -> str:
    return (
        f"at most {MAX_METRIC_KEYS} distinct metric names per attempt, and {count}: "
        "report a fixed set of metrics, not one name per step or item"
    )


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
