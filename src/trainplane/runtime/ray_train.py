"""Running a train function on a gang of workers with Ray Train.

Ray Train places the workers and restarts the whole worker group when a worker
dies, up to the attempt's restart budget. Each Ray Train worker supervises one
rank process (``python -m trainplane.runtime.local`` with torchrun's
environment) that does the training: inside the worker actor, the training loop
would share its interpreter with Ray's own threads, which measurably slows
steps (about 15% on a 2-core machine); a process of its own trains as fast as
under bare torchrun. The worker raises when its rank process fails, which is
how Ray Train sees the failure.

Ray Train's restarts in place spend the job's one restart budget: each is
counted and reported as it happens (runtime.restart_budget).

Which checkpoint a restarted group resumes from is decided by trainplane's
storage, not by Ray Train's own checkpoint bookkeeping: Ray Train is never told
about checkpoints at all.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainplane.jobs.spec import FinetuneSpec, TrainSpec, load_spec
from trainplane.runtime import env as tp_env
from trainplane.runtime.devices import visible_devices_env
from trainplane.runtime.preemption import EXIT_PREEMPTED
from trainplane.runtime.processes import forward_output
from trainplane.runtime.secrets import SecretsUnavailable, secret_env
from trainplane.runtime.train_storage import ray_train_storage

if TYPE_CHECKING:
    from trainplane.runtime.rendezvous import Meeting


def worker_main(config: dict[str, Any]) -> None:
    """One Ray Train worker. Module-level so Ray can ship it by reference."""
    import ray.train

    from trainplane.runtime.rank_pool import start_rank_process
    from trainplane.runtime.rendezvous import meet
    from trainplane.runtime.start_events import mark

    mark("worker running")

    context = ray.train.get_context()
    rank = context.get_world_rank()
    # The rank processes form their own process group: its address, and the
    # GPUs each sees, are agreed through Ray (runtime.rendezvous), so this
    # worker opens no communicator or CUDA context of its own.
    meeting = meet(context, on_gpu=config["on_gpu"])
    try:
        # Fetched by each worker, never handed through Ray (runtime.secrets).
        secrets = secret_env(load_spec(config["spec"]))
    except SecretsUnavailable as exc:
        raise RankFailed(f"rank {rank}: {exc}", time.time()) from None
    error_file = os.path.join(tempfile.mkdtemp(prefix="trainplane-rank-"), "error")
    env = {
        **os.environ,
        **secrets,
        **rank_process_env(config, context, meeting),
        tp_env.ERROR_FILE: error_file,
    }
    mark("worker starting rank process")
    # Forked from a parent that has torch imported, when the pool is on (runtime.rank_pool).
    process = start_rank_process(env, project=config["spec"].get("project", ""))
    forward_output(process, rank=rank)
    code = process.wait()
    cause, failed_at = _read_and_remove(error_file)  # removed whether the rank failed or not
    # A preempted rank returns like a finished one: raising would make Ray
    # Train restart the group. The driver learns of it from the checkpoint.
    if code not in (0, EXIT_PREEMPTED):
        raise RankFailed(f"rank {rank} failed: {cause or f'exit code {code}'}", failed_at)


def rank_process_env(config: dict[str, Any], context: Any, meeting: Meeting) -> dict[str, str]:
    """What a worker's rank process is started with, on top of the worker's
    own environment and the job's secrets: torchrun's variables, and its
    node's GPUs in local-rank order (runtime.devices)."""
    return {
        **tp_env.torchrun_env(
            rank=context.get_world_rank(),
            local_rank=context.get_local_rank(),
            world_size=context.get_world_size(),
            local_world_size=context.get_local_world_size(),
            group_rank=context.get_node_rank(),
            master_addr=meeting.master_addr,
            master_port=meeting.master_port,
        ),
        **visible_devices_env(meeting.visible_devices),
        tp_env.SPEC: json.dumps(config["spec"]),
        tp_env.DEVICE: "cuda" if config["on_gpu"] else "cpu",
        "PYTHONUNBUFFERED": "1",
    }


class RankFailed(RuntimeError):
    """A rank process failed. The message carries the rank's own one-line
    account when it lived to write one (a Python exception), else its exit
    code; ``failed_at`` is when it wrote it (None: it did not)."""

    def __init__(self, message: str, failed_at: float | None = None) -> None:
        super().__init__(message, failed_at)
        self.failed_at = failed_at

    def __str__(self) -> str:
        return str(self.args[0])


def _read_and_remove(path: str) -> tuple[str | None, float | None]:
    try:
        with open(path) as handle:
            return handle.read().strip() or None, os.fstat(handle.fileno()).st_mtime
    except OSError:
        return None, None
    finally:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def failure_cause(exc: BaseException) -> str:
    """The account of the rank of a Ray Train failure that failed first, else
    the exception's own first line."""
    from trainplane.runtime.local import describe

    failures = getattr(exc, "worker_failures", None)
    if failures:
        # The rank that failed first: the others usually fail because it did
        # (a collective with a dead peer), later.
        def order(rank: int) -> tuple[float, int]:
            failure = failures[rank]
            args = getattr(failure, "args", ())
            failed_at = getattr(failure, "failed_at", None)
            if failed_at is None and len(args) > 1 and isinstance(args[1], float):
                failed_at = args[1]  # as Ray rebuilt it
            return (failed_at if failed_at is not None else float("inf"), rank)

        first = failures[min(failures, key=order)]
        # Ray may hand it back wrapped with its traceback: args[0] is ours.
        return str(first.args[0]) if isinstance(first, RankFailed) else describe(first)
    controller_failure = getattr(exc, "controller_failure", None)
    if controller_failure is not None:
        # Matched by name: the classes live in Ray Train's private modules
        # (or, ours, in one that imports them: runtime.restart_budget).
        if type(controller_failure).__name__ == "RestartBudgetSpent":
            return str(controller_failure)  # the account of the failure not retried
        if type(controller_failure).__name__ == "WorkerGroupStartupTimeoutError":
            from trainplane.runtime.start_timeout import placement_timeout_message, start_timeout

            workers = getattr(controller_failure, "num_workers", 0)
            return placement_timeout_message(workers, start_timeout())
        return describe(controller_failure)
    return describe(exc)


def run_with_ray_train(spec: TrainSpec | FinetuneSpec, *, on_gpu: bool, restarts_left: int) -> None:
    """Train on ``resources.gpus`` workers; raises when training fails for good."""
    import ray

    # Ray Train passes these on to its controller and workers. Its print patch
    # would log every line of user output twice; trainplane does its own
    # preemption handling (the scheduler), so no watcher actor is needed.
    os.environ.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")
    os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
    # Ray Train would move each worker into a folder of its own, racing the
    # rank process it starts: the ranks run in the job's working_dir, as they
    # do everywhere else (relative paths, and the export's test of which
    # modules are the job's own code, depend on it).
    os.environ["RAY_CHDIR_TO_TRIAL_DIR"] = "0"
    ray.init(logging_level=logging.WARNING)
    from trainplane.runtime.start_events import mark

    mark("driver joined Ray")
    ray_train_trainer(spec, on_gpu=on_gpu, restarts_left=restarts_left).fit()


def ray_train_trainer(
    spec: TrainSpec | FinetuneSpec,
    *,
    on_gpu: bool,
    restarts_left: int,
    worker: Callable[[dict[str, Any]], None] = worker_main,
) -> Any:
    """The trainer of ``resources.gpus`` workers each running ``worker``.

    A plain DataParallelTrainer (less two actors it does not need,
    runtime.lean_trainer), not a TorchTrainer: that one would open a
    torch process group between the workers (NCCL on GPUs: a communicator and
    a CUDA context per GPU, taken from training) and share the node's GPUs
    among them its own way. The workers only supervise rank processes, which
    open the job's process group themselves."""
    from ray.train import BackendConfig, FailureConfig, RunConfig, ScalingConfig

    from trainplane.runtime.lean_trainer import LeanTrainer
    from trainplane.runtime.restart_budget import RestartBudget

    resources = spec.resources
    per_worker = {"CPU": float(resources.cpus_per_worker) if on_gpu else 1.0}
    if on_gpu:
        per_worker["GPU"] = 1.0
    attempt = os.environ.get(tp_env.ATTEMPT_ID, "local")
    storage_path, storage_filesystem = ray_train_storage(
        os.environ.get(tp_env.CHECKPOINT_URI)
        or os.path.join(tempfile.gettempdir(), "trainplane-ray-train", "checkpoints")
    )
    return LeanTrainer(
        worker,
        # The workers get the stored form (plain JSON travels to any worker
        # process) and each parses it again.
        train_loop_config={"spec": spec.model_dump(mode="json"), "on_gpu": on_gpu},
        backend_config=BackendConfig(),
        scaling_config=ScalingConfig(
            num_workers=resources.gpus,
            use_gpu=on_gpu,
            resources_per_worker=per_worker,
        ),
        run_config=RunConfig(
            name=f"trainplane-{attempt}",
            # Ray Train keeps only its own run state here; checkpoints go to
            # the job's storage through trainplane.
            storage_path=storage_path,
            storage_filesystem=storage_filesystem,
            # A worker group the cluster cannot place is a controller failure
            # Ray Train would retry forever (every start timeout), leaving the
            # attempt RUNNING with nothing running: it gets the same budget.
            # Ray Train counts the two kinds apart; RestartBudget counts them
            # together, and reports each restart to the control plane.
            failure_config=FailureConfig(
                max_failures=restarts_left, controller_failure_limit=restarts_left
            ),
            callbacks=[RestartBudget(restarts_left)],
        ),
    )
