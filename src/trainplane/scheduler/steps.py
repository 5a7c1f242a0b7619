"""The slow half of watching an attempt: ask its cluster, with no transaction
open, and describe what was found as an Outcome for ``services.attempts``."""

from __future__ import annotations

from datetime import datetime

from trainplane.backends.ray import ClusterUnreachable, LaunchRejected, RayCluster, RayClusters
from trainplane.jobs.states import AttemptStatus, JobStatus
from trainplane.scheduler.launch import LaunchError, launch_request
from trainplane.services.attempts import (
    AttemptWork,
    Launched,
    Observed,
    Outcome,
    Rejected,
    Unreachable,
)

MAX_RUNTIME = "max_runtime"
CANCELLED = "cancelled"


def advance(
    work: AttemptWork, clusters: RayClusters, now: datetime, *, control_plane_url: str | None
) -> Outcome:
    if work.cluster_address is None:
        return Unreachable("its cluster was removed")
    ray = clusters.get(work.cluster_address)
    try:
        if work.job_status is JobStatus.CANCELLING or work.stop_reason:
            return _stop(ray, work, work.stop_reason or CANCELLED)
        if work.status is AttemptStatus.PENDING:
            request = launch_request(
                job_id=work.job_id,
                attempt_id=work.attempt_id,
                spec=work.spec,
                accelerator=work.accelerator,
                control_plane_url=control_plane_url,
            )
            new = ray.submit(
                work.attempt_id,
                entrypoint=request.entrypoint,
                runtime_env=request.runtime_env,
                entrypoint_resources=request.entrypoint_resources,
                metadata=request.metadata,
            )
            return Launched(new=new)
        state = ray.state(work.attempt_id)
        if state is None:
            return Observed(status=None)
        if state.status == "RUNNING" and _over_time(work, now):
            return _stop(ray, work, MAX_RUNTIME)
        logs = ray.logs(work.attempt_id) if state.ended else None
        return Observed(state.status, state.message, state.exit_code, logs)
    except LaunchError as exc:
        return Rejected(str(exc))
    except LaunchRejected as exc:
        return Rejected(str(exc))
    except ClusterUnreachable as exc:
        return Unreachable(str(exc))


def _stop(ray: RayCluster, work: AttemptWork, why: str) -> Observed:
    """Ask the cluster to stop the attempt and report where it stands; called
    again on every look until the Ray job has ended."""
    ray.stop(work.attempt_id)
    state = ray.state(work.attempt_id)
    if state is None:
        return Observed(status=None, stop_reason=why)
    logs = ray.logs(work.attempt_id) if state.ended else None
    return Observed(state.status, state.message, state.exit_code, logs, stop_reason=why)


def _over_time(work: AttemptWork, now: datetime) -> bool:
    if work.max_runtime_seconds is None or work.job_started_at is None:
        return False
    return (now - work.job_started_at).total_seconds() > work.max_runtime_seconds
