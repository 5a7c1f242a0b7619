"""Attempts under a lease: claim the ones due for a look, and apply what the
cluster said about them.

A scheduler claims a batch (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so
concurrent schedulers take disjoint batches), stamps each with a fresh lease
token and commits. It then talks to the clusters with no transaction open, and
applies each result in a new transaction only if the attempt still carries its
token: a scheduler that stalled past its lease cannot overwrite the one that
took over. ``lease_expires_at`` doubles as "look again at": after a result is
applied the token is cleared and the attempt is due again a poll interval later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from trainplane.db.models import Cluster, Job, JobAttempt
from trainplane.errors import StaleStateError
from trainplane.jobs.durations import format_duration, parse_duration
from trainplane.jobs.preemption import PREEMPTED
from trainplane.jobs.retries import after_failure
from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES, AttemptStatus, JobStatus
from trainplane.runtime import env as tp_env
from trainplane.runtime.start_timeout import FIXED_START_TIMEOUT, cluster_start_timeout
from trainplane.services.leases import claim_due
from trainplane.services.preemption import preemptor_name
from trainplane.services.restarts import restarts_used, restarts_used_by
from trainplane.services.status import SCHEDULER_ACTOR, set_status

A = AttemptStatus
_LIVE_VALUES = [s.value for s in LIVE_ATTEMPT_STATUSES]
# The stop_reason of an attempt stopped because its step stopped advancing.
STUCK = "stuck"
LOG_TAIL_BYTES = 64 * 1024
REASON_LOG_LINES = 20


@dataclass(frozen=True)
class AttemptWork:
    """What the slow phase needs to know about one claimed attempt."""

    attempt_id: str
    lease_token: str
    job_id: str
    project_name: str
    folder: str | None  # jobs.folder (services.locations)
    number: int
    status: AttemptStatus
    job_status: JobStatus
    stop_reason: str | None
    cluster_name: str | None
    cluster_address: str | None
    accelerator: str
    spec: dict[str, Any]
    created_at: datetime
    last_seen_at: datetime | None
    job_started_at: datetime | None
    max_runtime_seconds: int | None
    # Progress as the runtime reported it; an attempt that never reported
    # (last_progress_at None) is never judged stuck.
    progress_step: int | None = None
    last_progress_at: datetime | None = None
    stuck_after_seconds: int | None = None  # the spec's stuck_after; None: the server's
    stop_requested_at: datetime | None = None
    # Only for a PENDING attempt: restarts its job has used so far (attempts
    # that ran and failed or were lost, and restarts in place: jobs.retries),
    # and whether the attempt before it was preempted.
    restarts_used: int = 0
    after_preemption: bool = False
    # How long its workers may wait to be placed: its cluster's (autoscaling
    # clusters need minutes to add a node).
    start_timeout: float = FIXED_START_TIMEOUT


# --- outcomes of the slow phase ---------------------------------------------------


@dataclass(frozen=True)
class Launched:
    new: bool  # False: the Ray job already existed (a launch repeated after a crash)


@dataclass(frozen=True)
class Rejected:
    message: str  # the cluster refused the job; retrying will not help


@dataclass(frozen=True)
class Unreachable:
    message: str


@dataclass(frozen=True)
class Observed:
    status: str | None  # Ray's status; None when the cluster has no such job
    message: str = ""
    exit_code: int | None = None
    logs: str | None = None  # the whole log, fetched once the Ray job ended
    stop_reason: str | None = None  # set when this look asked the cluster to stop it


Outcome = Launched | Rejected | Unreachable | Observed


@dataclass
class Applied:
    job_status: JobStatus | None = None  # the job's status after, if it changed
    notes: list[str] = field(default_factory=list)


# --- claiming -----------------------------------------------------------------------


def claim_attempts(
    session: Session, now: datetime, *, lease_seconds: float, limit: int
) -> list[AttemptWork]:
    live = [s.value for s in LIVE_ATTEMPT_STATUSES]
    with session.begin():
        token, ids = claim_due(
            session,
            JobAttempt.id,
            JobAttempt.status.in_(live),
            now,
            lease_seconds=lease_seconds,
            limit=limit,
        )
        if not ids:
            return []
        rows = session.execute(
            select(JobAttempt, Job, Cluster)
            .join(Job, Job.id == JobAttempt.job_id)
            .outerjoin(Cluster, Cluster.id == JobAttempt.cluster_id)
            .where(JobAttempt.id.in_(ids))
        ).all()
        history = _launch_history(
            session, [job.id for attempt, job, _ in rows if attempt.status == A.PENDING.value]
        )
        return [
            AttemptWork(
                attempt_id=attempt.id,
                lease_token=token,
                job_id=job.id,
                project_name=job.project_name,
                folder=job.folder,
                number=attempt.number,
                status=AttemptStatus(attempt.status),
                job_status=JobStatus(job.status),
                stop_reason=attempt.stop_reason,
                cluster_name=cluster.name if cluster else None,
                cluster_address=cluster.address if cluster else None,
                accelerator=cluster.accelerator if cluster else "cpu",
                start_timeout=cluster_start_timeout(
                    autoscaling=cluster.autoscaling,
                    start_timeout_seconds=cluster.start_timeout_seconds,
                )
                if cluster
                else FIXED_START_TIMEOUT,
                spec=job.spec,
                created_at=attempt.created_at,
                last_seen_at=attempt.last_seen_at,
                job_started_at=job.started_at,
                max_runtime_seconds=job.max_runtime_seconds,
                progress_step=attempt.progress_step,
                last_progress_at=attempt.last_progress_at,
                stuck_after_seconds=_seconds(job.spec.get("stuck_after")),
                stop_requested_at=attempt.stop_requested_at,
                **history.get(job.id, {}),
            )
            for attempt, job, cluster in rows
        ]


def _launch_history(session: Session, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """What launching the next attempt of each job needs to know about the
    earlier ones: how many restarts they used (jobs.retries), and whether the
    last one was preempted (the next resumes from its checkpoint whatever the
    spec says)."""
    if not job_ids:
        return {}
    history: dict[str, dict[str, Any]] = {
        job_id: {"restarts_used": used.before_next_attempt, "after_preemption": False}
        for job_id, used in restarts_used(session, job_ids).items()
    }
    rows = session.execute(
        select(JobAttempt.job_id, JobAttempt.stop_reason)
        .where(JobAttempt.job_id.in_(job_ids), JobAttempt.status.not_in(_LIVE_VALUES))
        .order_by(JobAttempt.job_id, JobAttempt.number)
    )
    for row in rows:
        history[row.job_id]["after_preemption"] = row.stop_reason == PREEMPTED
    return history


def _seconds(duration: str | None) -> int | None:
    return parse_duration(duration) if duration else None


# --- applying -----------------------------------------------------------------------


def apply_outcome(
    session: Session,
    work: AttemptWork,
    outcome: Outcome,
    now: datetime,
    *,
    poll_seconds: float,
    starting_poll_seconds: float,
    lost_after_seconds: float,
) -> Applied | None:
    """Apply ``outcome`` if the lease still holds; None if it was lost."""
    with session.begin():
        attempt = session.scalar(
            select(JobAttempt)
            .where(JobAttempt.id == work.attempt_id, JobAttempt.lease_token == work.lease_token)
            .with_for_update()
        )
        if attempt is None:
            return None
        job = session.scalars(
            select(Job).where(Job.id == work.job_id).with_for_update(of=Job)
        ).one()
        applied = Applied()
        try:
            _apply(session, job, attempt, work, outcome, now, applied, lost_after_seconds)
        except StaleStateError:
            applied.notes.append("the job changed meanwhile; looking again next time")
        attempt.lease_token = None
        # Attempts on their way up are watched closely: how soon a job shows
        # RUNNING is what its user waits on. Running ones need fewer looks.
        starting = attempt.status != AttemptStatus.RUNNING.value
        delay = starting_poll_seconds if starting else poll_seconds
        attempt.lease_expires_at = now + timedelta(seconds=delay)
        return applied


def _apply(
    session: Session,
    job: Job,
    attempt: JobAttempt,
    work: AttemptWork,
    outcome: Outcome,
    now: datetime,
    applied: Applied,
    lost_after_seconds: float,
) -> None:
    where = f"cluster {work.cluster_name}"
    status = JobStatus(job.status)

    def move(target: JobStatus, reason: str, message: str = "") -> None:
        set_status(session, job, target, reason=reason, message=message, actor=SCHEDULER_ACTOR)
        applied.job_status = target

    if isinstance(outcome, Launched):
        attempt.status = A.SUBMITTED.value
        attempt.submitted_at = attempt.submitted_at or now
        attempt.last_seen_at = now
        if not outcome.new:
            applied.notes.append("the Ray job already existed; not launched again")
        return

    if isinstance(outcome, Rejected):
        _end_attempt(attempt, A.FAILED, now, reason=outcome.message)
        if status is JobStatus.CANCELLING:
            move(JobStatus.CANCELLED, "cancelled before it started")
        else:
            move(JobStatus.FAILED, f"{where} refused the job: {outcome.message}")
        return

    if isinstance(outcome, Unreachable):
        seen = attempt.last_seen_at or attempt.submitted_at or attempt.created_at
        silent = (now - seen).total_seconds()
        if silent < lost_after_seconds:
            return  # keep looking; the cluster may come back
        lost = f"{where} stopped answering for {format_duration(int(silent))}: {outcome.message}"
        _end_attempt(attempt, A.LOST, now, reason=lost)
        _after_attempt_ended(session, job, attempt, move, lost, ran=attempt.started_at is not None)
        return

    assert isinstance(outcome, Observed)
    attempt.last_seen_at = now
    if outcome.stop_reason and not attempt.stop_reason:
        attempt.stop_reason = outcome.stop_reason
    if outcome.status is None:
        if attempt.status == A.PENDING.value:
            # Cancelled before the Ray job existed: nothing runs anywhere.
            _end_attempt(attempt, A.STOPPED, now, reason="stopped before launch")
            if status is JobStatus.CANCELLING:
                move(JobStatus.CANCELLED, "cancelled before it started")
            return
        lost = f"{where} no longer knows the attempt (was its Ray head restarted?)"
        _end_attempt(attempt, A.LOST, now, reason=lost)
        _after_attempt_ended(session, job, attempt, move, lost, ran=attempt.started_at is not None)
        return

    if outcome.status in ("PENDING",):
        return
    if outcome.status == "RUNNING":
        if attempt.status != A.RUNNING.value:
            attempt.status = A.RUNNING.value
            attempt.started_at = now
        if status is JobStatus.STARTING:
            workers = job.gpus
            kind = (
                "GPU workers with nccl"
                if work.accelerator.lower() != "cpu"
                else ("CPU workers with gloo (cpu cluster)")
            )
            move(JobStatus.RUNNING, f"running on {where}: {workers} {kind}")
        return

    # The Ray job ended.
    tail = (outcome.logs or "")[-LOG_TAIL_BYTES:]
    attempt.log_tail = tail
    attempt.exit_code = outcome.exit_code
    last_lines = "\n".join(tail.strip().splitlines()[-REASON_LOG_LINES:])
    if outcome.status == "SUCCEEDED":
        _end_attempt(attempt, A.SUCCEEDED, now, reason="succeeded")
        if status in (JobStatus.STARTING, JobStatus.RUNNING, JobStatus.CANCELLING):
            move(JobStatus.SUCCEEDED, f"succeeded on {where}", last_lines)
        return
    if attempt.stop_reason == PREEMPTED and status is not JobStatus.CANCELLING:
        # Whether it stopped by itself after its checkpoint or was stopped at
        # the end of the grace period, it goes back to the queue without using
        # a restart; the next attempt resumes from the latest checkpoint.
        by = preemptor_name(session, attempt.preempted_by)
        _end_attempt(attempt, A.STOPPED, now, reason=f"preempted by {by}")
        move(
            JobStatus.QUEUED,
            f"preempted by {by}; back in the queue, resumes from its latest checkpoint",
            last_lines,
        )
        return
    if attempt.stop_reason == STUCK and status is not JobStatus.CANCELLING:
        # Stopped by us for hanging: a failure like a crash, so the job
        # restarts (from its last checkpoint) while restarts remain. Whether
        # Ray calls the end STOPPED or FAILED depends on how the process died.
        reason = _stuck_reason(attempt, now)
        _end_attempt(attempt, A.FAILED, now, reason=reason)
        _after_attempt_ended(session, job, attempt, move, reason, ran=True, message=last_lines)
        return
    if outcome.status == "STOPPED":
        _end_attempt(
            attempt,
            A.STOPPED,
            now,
            reason=f"stopped ({attempt.stop_reason or 'outside trainplane'})",
        )
        if status is JobStatus.CANCELLING:
            move(JobStatus.CANCELLED, "cancelled; the attempt was stopped", last_lines)
        elif attempt.stop_reason == "max_runtime":
            limit = format_duration(job.max_runtime_seconds or 0)
            move(JobStatus.FAILED, f"exceeded max_runtime {limit}; stopped", last_lines)
        else:
            move(
                JobStatus.FAILED,
                f"the Ray job was stopped outside trainplane on {where}",
                last_lines,
            )
        return
    # FAILED
    code = outcome.exit_code
    detail = _failure_cause(tail) or _last_line(tail) or outcome.message
    reason = f"exit code {code}" if code is not None else "the Ray job failed"
    reason = f"{reason} on {where}: {detail}" if detail else f"{reason} on {where}"
    _end_attempt(attempt, A.FAILED, now, reason=reason)
    if status is JobStatus.CANCELLING:
        move(JobStatus.CANCELLED, "cancelled; the attempt ended", last_lines)
        return
    _after_attempt_ended(session, job, attempt, move, reason, ran=True, message=last_lines)


def _after_attempt_ended(
    session: Session,
    job: Job,
    attempt: JobAttempt,
    move: Any,
    reason: str,
    *,
    ran: bool,
    message: str = "",
) -> None:
    """Retry per the job's policy, or end it. An attempt lost before it ever ran
    goes back to the queue without using a restart."""
    status = JobStatus(job.status)
    if status is JobStatus.CANCELLING:
        move(JobStatus.CANCELLED, f"cancelled; {reason}", message)
        return
    if not ran:
        move(JobStatus.QUEUED, f"back in the queue: {reason}", message)
        return
    retries = job.spec.get("retries") or {}
    session.flush()
    spent = restarts_used_by(session, job.id)  # this attempt's failure included
    decision = after_failure(
        max_restarts=int(retries.get("max_restarts", 0)),
        failures_so_far=spent.failed_attempts,
        backoff_seconds=float(retries.get("backoff_seconds", 30)),
        in_place_restarts=spent.in_place,
    )
    if not decision.retry:
        used = decision.restarts_used
        suffix = f" (after {used} restart{'s' if used != 1 else ''})" if used else ""
        move(JobStatus.FAILED, f"{reason}{suffix}", message)
        return
    job.next_attempt_at = (attempt.finished_at or attempt.created_at) + timedelta(
        seconds=decision.delay_seconds
    )
    limit = int(retries.get("max_restarts", 0))
    move(
        JobStatus.RESTARTING,
        f"{reason}; restart {decision.restarts_used} of {limit} in "
        f"{format_duration(max(1, int(decision.delay_seconds)))}",
        message,
    )


def _stuck_reason(attempt: JobAttempt, now: datetime) -> str:
    since = attempt.last_progress_at or attempt.started_at or now
    silent = format_duration(max(1, int((now - since).total_seconds())))
    return f"stuck: no progress for {silent} (last step {attempt.progress_step})"


def _end_attempt(attempt: JobAttempt, status: AttemptStatus, now: datetime, *, reason: str) -> None:
    attempt.status = status.value
    attempt.finished_at = now
    attempt.reason = reason


def _failure_cause(text: str) -> str:
    """The cause the driver reported for a training failure, if it did."""
    for line in reversed(text.strip().splitlines()):
        _, marker, cause = line.partition(tp_env.TRAINING_FAILED)
        if marker:
            return cause.strip()[:300]
    return ""


def _last_line(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line and not line.startswith("trainplane:"):
            return line[:300]
    return ""


def requeue_restarts(session: Session, now: datetime) -> int:
    """RESTARTING jobs whose backoff is over go back to the queue."""
    with session.begin():
        due = list(
            session.scalars(
                select(Job)
                .where(
                    Job.status == JobStatus.RESTARTING.value,
                    and_(Job.next_attempt_at.is_not(None), Job.next_attempt_at <= now),
                )
                .with_for_update(skip_locked=True)
            )
        )
        for job in due:
            try:
                set_status(
                    session,
                    job,
                    JobStatus.QUEUED,
                    reason="restart backoff over; back in the queue",
                    actor=SCHEDULER_ACTOR,
                )
            except StaleStateError:
                continue
        return len(due)
