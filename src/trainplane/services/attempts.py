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

from trainplane.db.models import Cluster, Job, JobAttempt, SweepTrial
from trainplane.errors import StaleStateError
from trainplane.jobs.attempts import RayJobStatus, StopReason, decide
from trainplane.jobs.durations import format_duration
from trainplane.jobs.retries import after_failure
from trainplane.jobs.spec import FinetuneSpec, Retries, SpecError, TrainSpec, load_spec
from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES, AttemptStatus, JobStatus
from trainplane.runtime.start_timeout import FIXED_START_TIMEOUT, cluster_start_timeout
from trainplane.services.attempt_outcomes import (
    Launched,
    Outcome,
    finding_of,
    move_attempt,
    reason_facts,
    record_look,
)
from trainplane.services.attempt_outcomes import Observed as Observed  # re-exported
from trainplane.services.attempt_outcomes import Rejected as Rejected  # re-exported
from trainplane.services.attempt_outcomes import Unreachable as Unreachable  # re-exported
from trainplane.services.leases import claim_due
from trainplane.services.restarts import restarts_used, restarts_used_by
from trainplane.services.status import SCHEDULER_ACTOR, set_status

A = AttemptStatus
_LIVE_VALUES = [s.value for s in LIVE_ATTEMPT_STATUSES]


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
    # The job's spec, parsed once at the claim; None when the stored spec no
    # longer parses (spec_error names the field, and a launch is refused).
    spec: TrainSpec | FinetuneSpec | None
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
    spec_error: str = ""
    # How long its workers may wait to be placed: its cluster's (autoscaling
    # clusters need minutes to add a node).
    start_timeout: float = FIXED_START_TIMEOUT
    # Only for a PENDING attempt of a sweep's trial: the steps at which the
    # sweep judges it (its runtime reports them at once and waits).
    decision_steps: tuple[int, ...] = ()


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
                spec=spec,
                spec_error=spec_error,
                created_at=attempt.created_at,
                last_seen_at=attempt.last_seen_at,
                job_started_at=job.started_at,
                max_runtime_seconds=job.max_runtime_seconds,
                progress_step=attempt.progress_step,
                last_progress_at=attempt.last_progress_at,
                stuck_after_seconds=spec.stuck_after_seconds if spec else None,
                stop_requested_at=attempt.stop_requested_at,
                **history.get(job.id, {}),
            )
            for attempt, job, cluster in rows
            for spec, spec_error in [parse_stored_spec(job.spec)]
        ]


def _launch_history(session: Session, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """What launching the next attempt of each job needs to know about the
    earlier ones: how many restarts they used (jobs.retries), and whether the
    last one was preempted (the next resumes from its checkpoint whatever the
    spec says); and for a sweep's trial, its decision steps."""
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
        history[row.job_id]["after_preemption"] = row.stop_reason == StopReason.PREEMPTED
    trials = session.execute(
        select(SweepTrial.job_id, SweepTrial.decision_steps).where(SweepTrial.job_id.in_(job_ids))
    )
    for trial in trials:
        history[trial.job_id]["decision_steps"] = tuple(trial.decision_steps or ())
    return history


def parse_stored_spec(document: dict[str, Any]) -> tuple[TrainSpec | FinetuneSpec | None, str]:
    """A stored spec's typed form, or None and what is wrong with it."""
    try:
        return load_spec(document), ""
    except SpecError as exc:
        return None, str(exc)


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
    """Record the look, then do what jobs.attempts decides about it."""
    record_look(attempt, outcome, now)
    if isinstance(outcome, Launched) and not outcome.new:
        applied.notes.append("the Ray job already existed; not launched again")
    found = finding_of(outcome, attempt, now, lost_after_seconds=lost_after_seconds)
    decision = decide(
        found,
        stop=StopReason(attempt.stop_reason) if attempt.stop_reason else None,
        job=JobStatus(job.status),
        attempt=AttemptStatus(attempt.status),
    )
    facts = reason_facts(session, job, attempt, work.cluster_name, work.accelerator, outcome, now)
    if decision.attempt is not None:
        reason = decision.attempt_reason.format_map(facts)
        move_attempt(attempt, decision.attempt, now, reason=reason)
    if decision.job is None:
        return

    def move(target: JobStatus, reason: str, message: str = "") -> None:
        set_status(session, job, target, reason=reason, message=message, actor=SCHEDULER_ACTOR)
        applied.job_status = target

    ray_ended = isinstance(found, RayJobStatus) and found.ended
    message = facts["log_lines"] if ray_ended else ""
    reason = decision.job_reason.format_map(facts)
    if decision.uses_restart:
        # The only way to the retry policy: the decision said this attempt
        # used a restart.
        _after_attempt_ended(session, job, attempt, move, reason, ran=True, message=message)
    else:
        move(decision.job, reason, message)


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
    # An attempt only runs once its spec parsed at launch; should the stored
    # spec stop parsing later, the retry policy's defaults still apply.
    typed, _ = parse_stored_spec(job.spec)
    retries = typed.retries if typed else Retries()
    session.flush()
    spent = restarts_used_by(session, job.id)  # this attempt's failure included
    decision = after_failure(
        max_restarts=retries.max_restarts,
        failures_so_far=spent.failed_attempts,
        backoff_seconds=retries.backoff_seconds,
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
    limit = retries.max_restarts
    move(
        JobStatus.RESTARTING,
        f"{reason}; restart {decision.restarts_used} of {limit} in "
        f"{format_duration(max(1, int(decision.delay_seconds)))}",
        message,
    )


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
