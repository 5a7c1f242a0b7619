"""Supervising one rank of a script or command job, wherever it runs (a
RankWorker of a gang, or the driver itself for one worker): its node's
folders (runtime.script_folders), its process, and for rank 0 of a job
with ``register_model`` the publication of the model it saved.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

from trainplane.runtime import env as tp_env
from trainplane.runtime.preemption import checkpointed_for_preemption
from trainplane.runtime.processes import die_with_parent, forward_output
from trainplane.runtime.script_folders import NodeFolders, enter, leave
from trainplane.storage.backends import StorageError

# A rank whose folders could not be set up (it says why) never started.
EXIT_NO_FOLDERS = 1
PUBLISH_MODEL = "trainplane.runtime.script_model"


@dataclass(frozen=True)
class RankPlan:
    """What the driver decided once for every rank of the attempt."""

    attempt_id: str
    nodes: int
    resume: str | None  # the checkpoint's URI, or None for a fresh start
    register_model: bool


def run_rank(argv: list[str], env: dict[str, str], *, rank: int, plan: RankPlan) -> int:
    """Runs the rank's process with ``env`` plus its folders; rank 0 then
    publishes the model when the job registers one. The exit code is the
    rank's: a failed model publication makes it non-zero."""
    folders = NodeFolders.for_attempt(plan.attempt_id)
    try:
        try:
            env = {**env, **enter(folders, resume=plan.resume, nodes=plan.nodes)}
        except (OSError, StorageError) as exc:
            print(
                f"{tp_env.TRAINING_FAILED}rank {rank}: could not prepare its folders ({exc})",
                flush=True,
            )
            return EXIT_NO_FOLDERS
        code = _run(argv, env, rank)
        if code == 0 and rank == 0 and plan.register_model and not _preempted(env):
            # Its own process: what the model needs (MLflow, transformers)
            # is imported there, and a failure says why in one line.
            code = _run([sys.executable, "-m", PUBLISH_MODEL], env, rank)
        return code
    finally:
        leave(folders)


def _preempted(env: dict[str, str]) -> bool:
    """The script saved because it was asked to stop: the attempt ends as
    preempted (within the grace period), and the one that finishes publishes
    the model."""
    return checkpointed_for_preemption(env.get(tp_env.CHECKPOINT_URI), env.get(tp_env.ATTEMPT_ID))


def _run(argv: list[str], env: dict[str, str], rank: int) -> int:
    process = subprocess.Popen(
        argv,
        env={**env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=die_with_parent,
    )
    forward_output(process, rank=rank)
    return process.wait()
