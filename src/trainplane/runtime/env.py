"""Environment variables the control plane sets on every attempt's driver, and
the torchrun-style variables the driver sets on each worker process."""

from __future__ import annotations

# Set by the control plane on the driver (through the Ray runtime_env).
SPEC = "TRAINPLANE_SPEC"  # the job's validated spec, JSON
JOB_ID = "TRAINPLANE_JOB_ID"
ATTEMPT_ID = "TRAINPLANE_ATTEMPT_ID"
ACCELERATOR = "TRAINPLANE_ACCELERATOR"  # the cluster's accelerator: cpu, H100, ...
CONTROL_PLANE_URL = "TRAINPLANE_URL"
ATTEMPT_TOKEN = "TRAINPLANE_ATTEMPT_TOKEN"  # authenticates this attempt's progress reports
CHECKPOINT_URI = "TRAINPLANE_CHECKPOINT_URI"  # <storage>/<project>/<job-id>/checkpoints
MODEL_URI = "TRAINPLANE_MODEL_URI"  # <storage>/<project>/<job-id>/model, for register_model
RESTARTS_LEFT = "TRAINPLANE_RESTARTS_LEFT"  # worker-group restarts this attempt may use
# A sweep's trial only: the steps at which its sweep judges it ("10,30,90"); rank 0
# reports each one as soon as it reaches it and waits for the answer.
DECISION_STEPS = "TRAINPLANE_DECISION_STEPS"
# Set by the attempt's entrypoint: the pid of Ray's job supervisor, the
# driver's parent (the driver ends itself when that parent is gone).
SUPERVISOR_PID = "TRAINPLANE_SUPERVISOR_PID"
# Set by a script job's driver for its ranks' supervisors: the URI of the
# complete checkpoint (<storage>/step-<N>) the attempt resumes from.
RESUME_POINT = "TRAINPLANE_RESUME_POINT"
# Optional, for runs without a control plane: rank 0 appends its metrics here.
METRICS_FILE = "TRAINPLANE_METRICS_FILE"

# Set by the driver on each worker process.
DIST_BACKEND = "TRAINPLANE_DIST_BACKEND"  # gloo on CPU clusters, nccl on GPUs
DEVICE = "TRAINPLANE_DEVICE"  # cpu or cuda
# Where a rank process that fails writes one line saying why, for the Ray
# Train worker supervising it to raise with (the job's reason shows it).
ERROR_FILE = "TRAINPLANE_ERROR_FILE"

# Public: set on every rank process of a script or command job, local
# folders on the rank's node (DESIGN.md, "Scripts and trainers").
CHECKPOINT_DIR = "TRAINPLANE_CHECKPOINT_DIR"  # <scratch>/checkpoints, shared by the node's ranks
RESUME_FROM = "TRAINPLANE_RESUME_FROM"  # the checkpoint to resume from; unset on a fresh start
MODEL_DIR = "TRAINPLANE_MODEL_DIR"  # <scratch>/model, where rank 0 saves the final model
SYNC_DIR = "TRAINPLANE_SYNC_DIR"  # <scratch>/.sync, markers of the checkpoint publication
NODES = "TRAINPLANE_NODES"  # how many nodes the gang spans (GROUP_RANK is 0..NODES-1)

# The driver's last line when training fails, followed by the cause; the
# control plane makes it the failed job's reason.
TRAINING_FAILED = "trainplane: training failed: "


def torchrun_env(
    *,
    rank: int,
    local_rank: int,
    world_size: int,
    local_world_size: int,
    group_rank: int,
    master_addr: str,
    master_port: int,
) -> dict[str, str]:
    """What torchrun sets, so unmodified torchrun and Accelerate scripts run as is."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(local_world_size),
        "GROUP_RANK": str(group_rank),
        "NODE_RANK": str(group_rank),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RUN_ID": "trainplane",
    }
