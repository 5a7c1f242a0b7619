"""How an attempt is launched: the Ray job's entrypoint, runtime_env and the
resources of its driver."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainplane.jobs import retries
from trainplane.jobs.entrypoints import entrypoint_of
from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.runtime import env as tp_env
from trainplane.runtime.rank_pool import IDLE_ENV as RANK_POOL_IDLE_ENV
from trainplane.runtime.start_timeout import FIXED_START_TIMEOUT, START_TIMEOUT_ENV
from trainplane.services.file_access import FileAccess

# Ray runs the entrypoint with ``sh -c``. ``exec`` makes the driver the very
# process Ray's supervisor started, so a stop's SIGTERM reaches it even while
# Python is still starting (a shell in between would take the signal and leave
# the driver running, unseen); $PPID names that supervisor to the driver.
DRIVER_ENTRYPOINT = f'exec env {tp_env.SUPERVISOR_PID}="$PPID" python -m trainplane.runtime.driver'


@dataclass(frozen=True)
class LaunchRequest:
    entrypoint: str
    runtime_env: dict[str, Any]
    entrypoint_resources: dict[str, float]
    metadata: dict[str, str]


class LaunchError(Exception):
    """The attempt cannot be launched as specified (e.g. its working_dir is gone)."""


def launch_request(
    *,
    job_id: str,
    attempt_id: str,
    restarts_used: int,
    spec: TrainSpec | FinetuneSpec,
    accelerator: str,
    control_plane_url: str | None,
    attempt_token: str,
    checkpoint_dir: str,
    model_dir: str,
    code_folder: str | None = None,
    access: FileAccess | None = None,
    project: str = "",
    start_timeout: float = FIXED_START_TIMEOUT,
    decision_steps: Sequence[int] = (),
    rank_pool_idle_seconds: float = 0.0,
) -> LaunchRequest:
    """``start_timeout``: how long the attempt waits for its cluster to place
    its workers (runtime.start_timeout; the job's own entrypoint.env may set
    it). ``code_folder``: the job's unpacked code bundle (``entrypoint.code``).
    ``access``: what this server may ship from its own disk (None: nothing),
    asked again at every launch: a spec accepted before the rule, or a
    TRAINPLANE_SERVER_PATHS that shrank since, must not ship what the rule
    now refuses. ``project``: the job's, for the refusal's advice.
    ``decision_steps``: a sweep's trial's (``jobs.sweep_search``).
    ``rank_pool_idle_seconds``: the server's rank_pool_idle_seconds (0: the
    ranks are started without the pool, runtime.rank_pool)."""
    entrypoint = entrypoint_of(spec)  # None: the kind runs a recipe
    env_vars = {
        START_TIMEOUT_ENV: f"{start_timeout:g}",
        # A job's own entrypoint.env may turn the pool off for itself.
        **({RANK_POOL_IDLE_ENV: f"{rank_pool_idle_seconds:g}"} if rank_pool_idle_seconds else {}),
        **(entrypoint.env if entrypoint is not None else {}),
        tp_env.SPEC: json.dumps(spec.model_dump(mode="json"), separators=(",", ":")),
        tp_env.JOB_ID: job_id,
        tp_env.ATTEMPT_ID: attempt_id,
        tp_env.ACCELERATOR: accelerator,
        tp_env.ATTEMPT_TOKEN: attempt_token,
        tp_env.CHECKPOINT_URI: checkpoint_dir,
        tp_env.MODEL_URI: model_dir,
        tp_env.RESTARTS_LEFT: str(restarts_left(spec, restarts_used)),
        # Worker output reaches the job log without terminal colour codes,
        # and every rank's line reaches it: Ray would otherwise fold lines
        # that differ only in numbers (the rank tag) into one "[repeated 3x
        # across cluster]".
        "RAY_COLOR_PREFIX": "0",
        "RAY_DEDUP_LOGS": "0",
    }
    if decision_steps:
        # A sweep's trial: its runtime reports these steps at once (runtime.reporting).
        env_vars[tp_env.DECISION_STEPS] = ",".join(str(step) for step in decision_steps)
    if control_plane_url:
        env_vars[tp_env.CONTROL_PLANE_URL] = control_plane_url
    elif entrypoint is not None and entrypoint.secrets:
        # The runtime fetches secret values from the control plane; they are
        # never put in the runtime_env, which Ray's job list shows.
        raise LaunchError(
            "entrypoint.secrets: the job's secrets are handed to its runtime by the "
            "control plane, and this server has no TRAINPLANE_ADVERTISE_URL to give it"
        )
    runtime_env: dict[str, Any] = {"env_vars": env_vars}
    working_dir = entrypoint.working_dir if entrypoint is not None else None
    # Only an absolute folder is shipped (the CLI makes spec-relative paths
    # absolute). A relative one from an HTTP client would mean this server's
    # own directory, which is never what was meant: the job then runs in the
    # cluster's default directory.
    if code_folder is not None:
        runtime_env["working_dir"] = code_folder
    elif working_dir and os.path.isabs(working_dir):
        refusal = (
            access.working_dir_refusal(working_dir, project)
            if access is not None
            else f"'{working_dir}': this scheduler ships no folder of its own"
        )
        if refusal:
            raise LaunchError(f"entrypoint.working_dir: {refusal}")
        if not os.path.isdir(working_dir):
            raise LaunchError(f"entrypoint.working_dir {working_dir} is not a folder here")
        runtime_env["working_dir"] = working_dir
    if entrypoint is not None and entrypoint.pip:
        runtime_env["pip"] = list(entrypoint.pip)
    return LaunchRequest(
        entrypoint=DRIVER_ENTRYPOINT,
        runtime_env=runtime_env,
        entrypoint_resources=driver_resources(spec, accelerator),
        metadata={"trainplane_job_id": job_id, "trainplane_attempt_id": attempt_id},
    )


def restarts_left(spec: TrainSpec | FinetuneSpec, restarts_used: int) -> int:
    """Restarts the job's retry policy still allows, after the ``restarts_used``
    by earlier attempts: those that failed or were lost after they ran, and
    the restarts made in place within any attempt (jobs.retries; a preempted
    or cancelled attempt uses none). The attempt may spend them in place."""
    return retries.restarts_left(spec.retries.max_restarts, restarts_used)


def resuming_spec(spec: TrainSpec | FinetuneSpec) -> TrainSpec | FinetuneSpec:
    """``spec`` with ``checkpoint.resume: auto``: an attempt after a
    preemption continues from the latest checkpoint, whatever the spec says."""
    if spec.checkpoint.resume == "auto":
        return spec
    checkpoint = spec.checkpoint.model_copy(update={"resume": "auto"})
    return spec.model_copy(update={"checkpoint": checkpoint})


def driver_resources(spec: TrainSpec | FinetuneSpec, accelerator: str) -> dict[str, float]:
    """A one-worker job runs inside its driver, which then holds that worker's
    slot; a gang's driver only coordinates and holds nothing."""
    if spec.resources.gpus != 1:
        return {}
    if accelerator.lower() == "cpu":
        return {"CPU": 1.0}
    return {"CPU": float(spec.resources.cpus_per_worker), "GPU": 1.0}
