"""What one look at an attempt's cluster means for the attempt and its job (pure code).

The scheduler asks a cluster about an attempt and reports a :data:`Finding`;
:func:`decide` turns it, with the attempt's stop reason and the two statuses,
into one :class:`Decision`: the attempt's new status, the job's, their reasons
and whether the attempt used one of the job's restarts. ``services.attempts``
only applies it. Attempt statuses move only along :data:`ATTEMPT_TRANSITIONS`.

Reasons are templates: ``{where}`` and the other fields are facts the caller
knows (which cluster, how long it was silent, who preempted it), filled in with
``str.format_map``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES, AttemptStatus, JobStatus


class StopReason(StrEnum):
    """Why trainplane asked a cluster to stop an attempt (``job_attempts.stop_reason``)."""

    CANCELLED = "cancelled"  # the user cancelled the job
    MAX_RUNTIME = "max_runtime"  # the job ran longer than its spec's max_runtime
    STUCK = "stuck"  # its step stopped advancing for longer than stuck_after
    PREEMPTED = "preempted"  # its GPUs went to a higher-priority job
    PRUNED = "pruned"  # a sweep's trial whose objective fell behind (services.sweep_pruning)


class RayJobStatus(StrEnum):
    """A Ray job's status, as the Ray Jobs API reports it."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    @property
    def ended(self) -> bool:
        return self in RAY_ENDED


RAY_ENDED: frozenset[RayJobStatus] = frozenset(
    {RayJobStatus.STOPPED, RayJobStatus.SUCCEEDED, RayJobStatus.FAILED}
)


class ClusterFinding(StrEnum):
    """What a look found when the cluster gave no status for the Ray job."""

    LAUNCHED = "launched"  # submitted now, or found already there
    REFUSED = "refused"  # the launch or the cluster refused it; retrying will not help
    NO_ANSWER = "no answer"  # the cluster did not answer, not yet for long
    SILENT = "silent"  # the cluster has not answered for longer than it may
    FORGOTTEN = "forgotten"  # the cluster answered but has no such Ray job


Finding = ClusterFinding | RayJobStatus
ALL_FINDINGS: tuple[Finding, ...] = (*ClusterFinding, *RayJobStatus)

A = AttemptStatus
S = JobStatus
_ENDED_ATTEMPT = frozenset({A.SUCCEEDED, A.FAILED, A.STOPPED, A.LOST})

ATTEMPT_TRANSITIONS: dict[AttemptStatus, frozenset[AttemptStatus]] = {
    # RUNNING or ended from PENDING: the Ray job was already there when the
    # launch was repeated after a crash, or was stopped on cancel. STOPPED:
    # cancelled before any Ray job existed.
    A.PENDING: frozenset({A.SUBMITTED, A.RUNNING} | _ENDED_ATTEMPT),
    # Ended from SUBMITTED: it ended between two looks.
    A.SUBMITTED: frozenset({A.RUNNING} | _ENDED_ATTEMPT),
    A.RUNNING: _ENDED_ATTEMPT,
    A.SUCCEEDED: frozenset(),
    A.FAILED: frozenset(),
    A.STOPPED: frozenset(),
    A.LOST: frozenset(),
}


def attempt_may_move(current: AttemptStatus, target: AttemptStatus) -> bool:
    return target in ATTEMPT_TRANSITIONS[current]


@dataclass(frozen=True)
class Decision:
    """What to do with an attempt and its job after one look.

    ``job`` RESTARTING comes with ``uses_restart``: the attempt counts against
    the job's ``retries.max_restarts``, and the retry policy (``jobs.retries``)
    restarts the job if the budget has one left, else fails it; ``job_reason``
    is then the cause the policy's wording starts from.
    """

    attempt: AttemptStatus | None = None  # None: its status stays
    attempt_reason: str = ""  # set when the attempt ends
    job: JobStatus | None = None  # None: its status stays
    job_reason: str = ""
    uses_restart: bool = False


KEEP = Decision()

# Templates of reasons; their fields are filled in by the caller.
REFUSED = "{where} refused the job: {message}"
SILENT = "{where} stopped answering for {silence}: {message}"
FORGOTTEN = "{where} no longer knows the attempt (was its Ray head restarted?)"
RUNNING_ON = "running on {where}: {workers}"
SUCCEEDED_ON = "succeeded on {where}"
PREEMPTED_BY = "preempted by {preemptor}"
REQUEUED_AFTER_PREEMPTION = PREEMPTED_BY + "; back in the queue, resumes from its latest checkpoint"
OVER_MAX_RUNTIME = "exceeded max_runtime {max_runtime}; stopped"
STOPPED_OUTSIDE = "the Ray job was stopped outside trainplane on {where}"
CANCELLED_BEFORE_START = "cancelled before it started"
BEFORE_LAUNCH = "stopped before launch"
PRUNED = "pruned"
# The trial's own words: which rung, which values were compared (sweep_trials.pruned_reason).
PRUNED_BY_SWEEP = "{pruned}"


def decide(
    found: Finding,
    *,
    stop: StopReason | None,
    job: JobStatus,
    attempt: AttemptStatus,
) -> Decision:
    """The one decision about a look at a live attempt. ``stop`` is why
    trainplane asked the cluster to stop it, if it did (this look included).
    An attempt has run once it was seen RUNNING: only those use a restart
    when lost, unless trainplane was preempting them."""
    if attempt not in LIVE_ATTEMPT_STATUSES:
        return KEEP  # ended attempts are not looked at; nothing moves them back
    cancelling = job is S.CANCELLING
    if found is ClusterFinding.LAUNCHED:
        return Decision(attempt=A.SUBMITTED) if attempt is A.PENDING else KEEP
    if found is ClusterFinding.REFUSED:
        if cancelling:
            return Decision(A.FAILED, "{message}", S.CANCELLED, CANCELLED_BEFORE_START)
        return Decision(A.FAILED, "{message}", S.FAILED, REFUSED)
    if found in (ClusterFinding.NO_ANSWER, RayJobStatus.PENDING):
        return KEEP  # keep looking; the cluster may come back
    pruned = stop is StopReason.PRUNED and not cancelling
    lost = found is ClusterFinding.SILENT or (
        found is ClusterFinding.FORGOTTEN and attempt is not A.PENDING
    )
    if pruned and lost:
        # The sweep decided that the trial ends, whatever became of its cluster.
        cause = SILENT if found is ClusterFinding.SILENT else FORGOTTEN
        return Decision(A.LOST, cause, S.CANCELLED, PRUNED_BY_SWEEP)
    # A lost attempt uses a restart only if it ran and was not being
    # preempted: a preemption uses none, whichever way its attempt ends.
    lost_one_that_ran = attempt is A.RUNNING and stop is not StopReason.PREEMPTED
    if found is ClusterFinding.SILENT:
        return _ended_badly(A.LOST, SILENT, job, ran=lost_one_that_ran)
    if found is ClusterFinding.FORGOTTEN:
        if attempt is A.PENDING:
            # Cancelled before the Ray job existed: nothing runs anywhere.
            if cancelling:
                return Decision(A.STOPPED, BEFORE_LAUNCH, S.CANCELLED, CANCELLED_BEFORE_START)
            return Decision(A.STOPPED, BEFORE_LAUNCH)
        return _ended_badly(A.LOST, FORGOTTEN, job, ran=lost_one_that_ran)
    if found is RayJobStatus.RUNNING:
        moved = None if attempt is A.RUNNING else A.RUNNING
        if job is S.STARTING:
            return Decision(moved, "", S.RUNNING, RUNNING_ON)
        return Decision(moved)
    return _ray_job_ended(found, stop, job)


def _ray_job_ended(found: Finding, stop: StopReason | None, job: JobStatus) -> Decision:
    cancelling = job is S.CANCELLING
    if found is RayJobStatus.SUCCEEDED:
        if job in (S.STARTING, S.RUNNING, S.CANCELLING):
            return Decision(A.SUCCEEDED, "succeeded", S.SUCCEEDED, SUCCEEDED_ON)
        return Decision(A.SUCCEEDED, "succeeded")
    if stop is StopReason.PREEMPTED and not cancelling:
        # Whether it stopped by itself after its checkpoint or was stopped at
        # the end of the grace period, it goes back to the queue without using
        # a restart; the next attempt resumes from the latest checkpoint.
        return Decision(A.STOPPED, PREEMPTED_BY, S.QUEUED, REQUEUED_AFTER_PREEMPTION)
    if stop is StopReason.PRUNED and not cancelling:
        # It stopped by itself after its checkpoint (or was stopped at the end
        # of the grace period): the trial is over, it is not retried.
        return Decision(A.STOPPED, PRUNED, S.CANCELLED, PRUNED_BY_SWEEP)
    if stop is StopReason.STUCK and not cancelling:
        # Stopped by us for hanging: a failure like a crash, so the job
        # restarts (from its last checkpoint) while restarts remain. Whether
        # Ray calls the end STOPPED or FAILED depends on how the process died.
        return _ended_badly(A.FAILED, "{stuck}", job, ran=True)
    if found is RayJobStatus.STOPPED:
        stopped = f"stopped ({stop or 'outside trainplane'})"
        if cancelling:
            return Decision(A.STOPPED, stopped, S.CANCELLED, "cancelled; the attempt was stopped")
        if stop is StopReason.MAX_RUNTIME:
            return Decision(A.STOPPED, stopped, S.FAILED, OVER_MAX_RUNTIME)
        return Decision(A.STOPPED, stopped, S.FAILED, STOPPED_OUTSIDE)
    # Ray says FAILED.
    if cancelling:
        return Decision(A.FAILED, "{failure}", S.CANCELLED, "cancelled; the attempt ended")
    return _ended_badly(A.FAILED, "{failure}", job, ran=True)


def _ended_badly(end: AttemptStatus, cause: str, job: JobStatus, *, ran: bool) -> Decision:
    """Failed or lost: a cancelled job ends, one that never ran goes back to
    the queue without using a restart, and one that ran uses one."""
    if job is S.CANCELLING:
        return Decision(end, cause, S.CANCELLED, "cancelled; " + cause)
    if not ran:
        return Decision(end, cause, S.QUEUED, "back in the queue: " + cause)
    return Decision(end, cause, S.RESTARTING, cause, uses_restart=True)
