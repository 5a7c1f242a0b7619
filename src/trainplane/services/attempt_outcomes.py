"""What the scheduler's slow phase found out about an attempt, and how it is
written down: the Outcome types it reports, what each means as a
``jobs.attempts`` Finding, the attempt's record of the look, its one status
setter, and the facts the decision's reason templates are filled in with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainplane.db.models import Job, JobAttempt, SweepTrial
from trainplane.errors import InvalidTransitionError
from trainplane.jobs.attempts import ClusterFinding, Finding, RayJobStatus, attempt_may_move
from trainplane.jobs.durations import format_duration
from trainplane.jobs.states import AttemptStatus
from trainplane.runtime import env as tp_env
from trainplane.services.preemption import preemptor_name

LOG_TAIL_BYTES = 64 * 1024
REASON_LOG_LINES = 20


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
    status: str | None  # Ray's status (a RayJobStatus); None when the cluster has no such job
    message: str = ""
    exit_code: int | None = None
    logs: str | None = None  # the whole log, fetched once the Ray job ended
    stop_reason: str | None = None  # set when this look asked the cluster to stop it


Outcome = Launched | Rejected | Unreachable | Observed


def finding_of(
    outcome: Outcome, attempt: JobAttempt, now: datetime, *, lost_after_seconds: float
) -> Finding:
    if isinstance(outcome, Launched):
        return ClusterFinding.LAUNCHED
    if isinstance(outcome, Rejected):
        return ClusterFinding.REFUSED
    if isinstance(outcome, Unreachable):
        if _silent_seconds(attempt, now) < lost_after_seconds:
            return ClusterFinding.NO_ANSWER
        return ClusterFinding.SILENT
    if outcome.status is None:
        return ClusterFinding.FORGOTTEN
    return RayJobStatus(outcome.status)


def record_look(attempt: JobAttempt, outcome: Outcome, now: datetime) -> None:
    """What the attempt keeps of a look, whatever is decided about it: when
    the cluster last answered, why it was asked to stop, and once its Ray job
    ended, its exit code and the end of its log."""
    if isinstance(outcome, Launched):
        attempt.submitted_at = attempt.submitted_at or now
        attempt.last_seen_at = now
    if not isinstance(outcome, Observed):
        return
    attempt.last_seen_at = now
    if outcome.stop_reason and not attempt.stop_reason:
        attempt.stop_reason = outcome.stop_reason
    if outcome.status is not None and RayJobStatus(outcome.status).ended:
        attempt.log_tail = (outcome.logs or "")[-LOG_TAIL_BYTES:]
        attempt.exit_code = outcome.exit_code


def move_attempt(attempt: JobAttempt, target: AttemptStatus, now: datetime, *, reason: str) -> None:
    """The one place an attempt's status changes, along jobs.attempts' table."""
    current = AttemptStatus(attempt.status)
    if not attempt_may_move(current, target):
        raise InvalidTransitionError(f"attempt {attempt.id} cannot go from {current} to {target}")
    attempt.status = target.value
    if target is AttemptStatus.RUNNING:
        attempt.started_at = now
    elif target is not AttemptStatus.SUBMITTED:
        attempt.finished_at = now
        attempt.reason = reason


class ReasonFacts(dict[str, str]):
    """The fields of a reason template, each worked out the first time a
    template names it (naming the preemptor reads the database)."""

    def __init__(self, **makers: Callable[[], str]) -> None:
        super().__init__()
        self._makers = makers

    def __missing__(self, key: str) -> str:
        value = self[key] = self._makers[key]()
        return value


def reason_facts(
    session: Session,
    job: Job,
    attempt: JobAttempt,
    cluster_name: str | None,
    accelerator: str,
    outcome: Outcome,
    now: datetime,
) -> ReasonFacts:
    where = f"cluster {cluster_name}"
    kind = (
        "GPU workers with nccl"
        if accelerator.lower() != "cpu"
        else "CPU workers with gloo (cpu cluster)"
    )
    return ReasonFacts(
        where=lambda: where,
        message=lambda: getattr(outcome, "message", ""),
        silence=lambda: format_duration(int(_silent_seconds(attempt, now))),
        workers=lambda: f"{job.gpus} {kind}",
        preemptor=lambda: preemptor_name(session, attempt.preempted_by),
        stuck=lambda: _stuck_reason(attempt, now),
        failure=lambda: _failure_reason(attempt, getattr(outcome, "message", ""), where),
        max_runtime=lambda: format_duration(job.max_runtime_seconds or 0),
        log_lines=lambda: "\n".join(attempt.log_tail.strip().splitlines()[-REASON_LOG_LINES:]),
        pruned=lambda: _pruned_reason(session, job),
    )


def _pruned_reason(session: Session, job: Job) -> str:
    """Why the sweep stopped this trial, in the pruner's words (which rung,
    which values were compared): the reason its job ends with."""
    reason = session.scalar(select(SweepTrial.pruned_reason).where(SweepTrial.job_id == job.id))
    return reason or "pruned by its sweep"


def _silent_seconds(attempt: JobAttempt, now: datetime) -> float:
    seen = attempt.last_seen_at or attempt.submitted_at or attempt.created_at
    return (now - seen).total_seconds()


def _stuck_reason(attempt: JobAttempt, now: datetime) -> str:
    since = attempt.last_progress_at or attempt.started_at or now
    silent = format_duration(max(1, int((now - since).total_seconds())))
    return f"stuck: no progress for {silent} (last step {attempt.progress_step})"


def _failure_reason(attempt: JobAttempt, message: str, where: str) -> str:
    tail = attempt.log_tail
    detail = _failure_cause(tail) or _last_line(tail) or message
    code = attempt.exit_code
    reason = f"exit code {code}" if code is not None else "the Ray job failed"
    return f"{reason} on {where}: {detail}" if detail else f"{reason} on {where}"


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
