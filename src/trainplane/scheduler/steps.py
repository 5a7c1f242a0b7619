"""The slow half of watching an attempt: ask its cluster, with no transaction
open, and describe what was found as an Outcome for ``services.attempts``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from trainplane.backends.ray import ClusterUnreachable, LaunchRejected, RayCluster, RayClusters
from trainplane.jobs.attempts import RayJobStatus, StopReason
from trainplane.jobs.entrypoints import entrypoint_of
from trainplane.jobs.states import AttemptStatus, JobStatus
from trainplane.scheduler.code import BundleFolders
from trainplane.scheduler.launch import LaunchError, launch_request, resuming_spec
from trainplane.services.attempt_outcomes import (
    Launched,
    Observed,
    Outcome,
    Rejected,
    Unreachable,
)
from trainplane.services.attempt_tokens import attempt_token
from trainplane.services.attempts import AttemptWork
from trainplane.services.file_access import FileAccess
from trainplane.services.locations import checkpoint_root, model_root


@dataclass(frozen=True)
class AdvanceContext:
    """What advancing needs from the server's settings, the same for every attempt."""

    control_plane_url: str | None
    checkpoint_storage: str  # for jobs whose spec names no checkpoint.storage
    stuck_after_seconds: float  # for jobs whose spec sets no stuck_after
    token_key: bytes
    file_access: FileAccess  # what may be shipped from this machine (entrypoint.working_dir)
    preemption_grace_seconds: float = 120.0
    bundles: BundleFolders | None = None  # where jobs with entrypoint.code get their code
    rank_pool_idle_seconds: float = 0.0  # 0: no warm parents of rank processes


def advance(
    work: AttemptWork, clusters: RayClusters, now: datetime, *, context: AdvanceContext
) -> Outcome:
    if work.cluster_address is None:
        return Unreachable("its cluster was removed")
    ray = clusters.get(work.cluster_address)
    try:
        if work.job_status is JobStatus.CANCELLING:
            return _stop(ray, work, work.stop_reason or StopReason.CANCELLED)
        if work.stop_reason in (StopReason.PREEMPTED, StopReason.PRUNED):
            # Checkpoint first: the runtime stops by itself once it has saved;
            # only what still runs after the grace period is stopped.
            if _grace_over(work, now, context.preemption_grace_seconds):
                return _stop(ray, work, work.stop_reason)
            return _observe(ray, work)
        if work.stop_reason:
            return _stop(ray, work, work.stop_reason)
        if work.status is AttemptStatus.PENDING:
            spec = work.spec
            if spec is None:
                # Parsed at the claim: a stored spec the models no longer take
                # fails the attempt naming the field, before any cluster.
                return Rejected(work.spec_error)
            entrypoint = entrypoint_of(spec)
            code = entrypoint.code if entrypoint is not None else None
            if code and context.bundles is None:
                return Rejected("entrypoint.code: this scheduler cannot read code bundles")
            request = launch_request(
                job_id=work.job_id,
                attempt_id=work.attempt_id,
                restarts_used=work.restarts_used,
                spec=resuming_spec(spec) if work.after_preemption else spec,
                accelerator=work.accelerator,
                start_timeout=work.start_timeout,
                control_plane_url=context.control_plane_url,
                attempt_token=attempt_token(context.token_key, work.attempt_id),
                checkpoint_dir=checkpoint_root(
                    work.folder,
                    spec,
                    work.project_name,
                    work.job_id,
                    context.checkpoint_storage,
                ),
                model_dir=model_root(
                    work.folder,
                    spec,
                    work.project_name,
                    work.job_id,
                    context.checkpoint_storage,
                ),
                access=context.file_access,
                project=work.project_name,
                code_folder=context.bundles.folder(work.project_name, code)
                if code and context.bundles
                else None,
                decision_steps=work.decision_steps,
                rank_pool_idle_seconds=context.rank_pool_idle_seconds,
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
        running = state.status == RayJobStatus.RUNNING
        if running and _over_time(work, now):
            return _stop(ray, work, StopReason.MAX_RUNTIME)
        if running and is_stuck(work, now, context.stuck_after_seconds):
            return _stop(ray, work, StopReason.STUCK)
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


def _observe(ray: RayCluster, work: AttemptWork) -> Observed:
    state = ray.state(work.attempt_id)
    if state is None:
        return Observed(status=None)
    logs = ray.logs(work.attempt_id) if state.ended else None
    return Observed(state.status, state.message, state.exit_code, logs)


def _grace_over(work: AttemptWork, now: datetime, grace_seconds: float) -> bool:
    asked = work.stop_requested_at
    return asked is None or (now - asked).total_seconds() >= grace_seconds


def _over_time(work: AttemptWork, now: datetime) -> bool:
    if work.max_runtime_seconds is None or work.job_started_at is None:
        return False
    return (now - work.job_started_at).total_seconds() > work.max_runtime_seconds


def is_stuck(work: AttemptWork, now: datetime, default_seconds: float) -> bool:
    """The step has not gone up for longer than stuck_after. Only attempts
    that reported a step at least once can tell: a plain script never does."""
    if work.last_progress_at is None:
        return False
    limit = work.stuck_after_seconds or default_seconds
    return (now - work.last_progress_at).total_seconds() > limit
