"""Running a train function on a gang of workers with Ray Train's TorchTrainer.

Ray Train places the workers, sets up the process group (NCCL on GPUs, gloo on
CPUs) and restarts the whole worker group when a worker dies, up to the
attempt's restart budget. Which checkpoint a restarted group resumes from is
decided by trainplane's storage, not by Ray Train's own checkpoint
bookkeeping: Ray Train is never told about checkpoints at all.
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

from trainplane.runtime import env as tp_env


def worker_main(config: dict[str, Any]) -> None:
    """One Ray Train worker. Module-level so Ray can ship it by reference."""
    import ray.train
    import ray.train.torch

    context = ray.train.get_context()
    os.environ[tp_env.DEVICE] = "cuda" if config["on_gpu"] else "cpu"
    from trainplane.runtime.functions import run_rank

    run_rank(
        config["spec"],
        rank=context.get_world_rank(),
        local_rank=context.get_local_rank(),
        world_size=context.get_world_size(),
        local_world_size=context.get_local_world_size(),
        node_rank=context.get_node_rank(),
        device=ray.train.torch.get_device(),
    )


def run_with_ray_train(spec: dict[str, Any], *, on_gpu: bool, restarts_left: int) -> None:
    """Train on ``resources.gpus`` workers; raises when training fails for good."""
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    # Ray Train passes these on to its controller and workers. Its print patch
    # would log every line of user output twice; trainplane does its own
    # preemption handling (the scheduler), so no watcher actor is needed.
    os.environ.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")
    os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
    ray.init(logging_level=logging.WARNING)
    resources = spec["resources"]
    per_worker = {"CPU": float(resources.get("cpus_per_worker", 1)) if on_gpu else 1.0}
    if on_gpu:
        per_worker["GPU"] = 1.0
    attempt = os.environ.get(tp_env.ATTEMPT_ID, "local")
    trainer = TorchTrainer(
        worker_main,
        train_loop_config={"spec": spec, "on_gpu": on_gpu},
        torch_config=TorchConfig(backend="nccl" if on_gpu else "gloo"),
        scaling_config=ScalingConfig(
            num_workers=int(resources["gpus"]),
            use_gpu=on_gpu,
            resources_per_worker=per_worker,
        ),
        run_config=RunConfig(
            name=f"trainplane-{attempt}",
            # Ray Train keeps only its own run state here; checkpoints go to
            # the job's storage through trainplane.
            storage_path=os.path.join(tempfile.gettempdir(), "trainplane-ray-train"),
            failure_config=FailureConfig(max_failures=restarts_left),
        ),
    )
    trainer.fit()
