"""Job statuses and the one table of allowed transitions.

Every status change anywhere goes through ``trainplane.services.status.set_status``,
which consults :data:`ALLOWED_TRANSITIONS` (:data:`SWEEP_TRANSITIONS` for
sweeps); a pair not listed here cannot happen.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    QUEUED = "QUEUED"  # accepted, waiting for placement
    STARTING = "STARTING"  # an attempt was handed to a cluster, not yet running
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"  # an attempt ended badly; waiting out the backoff
    CANCELLING = "CANCELLING"  # the user cancelled; the cluster is stopping it
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


S = JobStatus

TERMINAL_STATUSES: frozenset[JobStatus] = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED})

ALLOWED_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    # FAILED from QUEUED: it can never be placed (quota budget gone, cluster removed).
    S.QUEUED: frozenset({S.STARTING, S.FAILED, S.CANCELLED}),
    # SUCCEEDED/FAILED from STARTING: the attempt finished between two polls.
    # QUEUED from STARTING: the cluster was lost before the attempt ran.
    # CANCELLED from STARTING/RUNNING: a sweep's trial pruned, its attempt
    # stopped by itself (jobs.attempts, StopReason.PRUNED).
    S.STARTING: frozenset(
        {S.RUNNING, S.SUCCEEDED, S.FAILED, S.RESTARTING, S.CANCELLING, S.QUEUED, S.CANCELLED}
    ),
    # QUEUED from RUNNING: preempted after a checkpoint, back in the queue.
    S.RUNNING: frozenset(
        {S.SUCCEEDED, S.FAILED, S.RESTARTING, S.CANCELLING, S.QUEUED, S.CANCELLED}
    ),
    # No attempt is alive while restarting, so a cancel ends it at once.
    S.RESTARTING: frozenset({S.QUEUED, S.STARTING, S.FAILED, S.CANCELLED}),
    # The attempt may finish on its own before the stop lands: the truth wins.
    S.CANCELLING: frozenset({S.CANCELLED, S.SUCCEEDED, S.FAILED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}

# Cancel requests: statuses where cancelling ends the job at once, because no
# attempt is alive, and statuses where a live attempt must be stopped first.
CANCEL_IMMEDIATELY: frozenset[JobStatus] = frozenset({S.QUEUED, S.RESTARTING})
CANCEL_VIA_CLUSTER: frozenset[JobStatus] = frozenset({S.STARTING, S.RUNNING})


# A sweep (a job of kind sweep) is never placed: it only searches, through
# its trials, then ends; a cancel waits in CANCELLING for its live trials.
SWEEP_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    **{status: frozenset() for status in JobStatus},
    S.QUEUED: frozenset({S.RUNNING, S.CANCELLED, S.FAILED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLING}),
    S.CANCELLING: frozenset({S.CANCELLED}),
}


def transitions_for(kind: str) -> dict[JobStatus, frozenset[JobStatus]]:
    """The transition table of a job of ``kind``."""
    return SWEEP_TRANSITIONS if kind == "sweep" else ALLOWED_TRANSITIONS


def is_allowed(current: JobStatus, target: JobStatus, kind: str = "train") -> bool:
    return target in transitions_for(kind)[current]


class AttemptStatus(StrEnum):
    """One try at running a job, mirroring its Ray job."""

    PENDING = "PENDING"  # placed; the Ray job may or may not exist yet
    SUBMITTED = "SUBMITTED"  # Ray accepted it
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"  # stopped on request (cancel, max_runtime)
    LOST = "LOST"  # the cluster stopped answering about it, or forgot it


LIVE_ATTEMPT_STATUSES: frozenset[AttemptStatus] = frozenset(
    {AttemptStatus.PENDING, AttemptStatus.SUBMITTED, AttemptStatus.RUNNING}
)
