"""How many CPU threads a rank's tensor operations use.

Ray sets ``OMP_NUM_THREADS`` to a worker's CPU reservation, ``cpus_per_worker``
(1 by default), so a GPU rank computes on the host with one thread. That is
right while the host only feeds the GPU, and wrong once the optimizer steps
there: with offload (FSDP2's ``cpu_offload``, ZeRO's ``offload_optimizer`` or
``offload_param``) Adam runs on the host over the whole model shard, and one
thread makes it the slowest part of the step. Such a rank takes its share of
the node's CPUs instead (and never less than it reserved), unless the job set
``OMP_NUM_THREADS`` itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from trainplane.jobs.entrypoints import entrypoint_of
from trainplane.jobs.spec import DeepSpeedOptions, FinetuneSpec, FSDPOptions, TrainSpec

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def offloads_to_host(spec: TrainSpec | FinetuneSpec) -> bool:
    """Whether the strategy steps the optimizer in host memory."""
    strategy = spec.strategy
    if strategy.type == "fsdp":
        return (strategy.fsdp or FSDPOptions()).cpu_offload
    if strategy.type == "deepspeed":
        options = strategy.deepspeed or DeepSpeedOptions()
        return options.offload_optimizer != "none" or options.offload_param != "none"
    return False


def usable_cpus() -> int:
    """The CPUs this process may run on, within its container's CPU quota."""
    cpus = len(os.sched_getaffinity(0))
    try:
        quota, period = CGROUP_CPU_MAX.read_text().split()
        if quota != "max":
            cpus = min(cpus, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return cpus


def threads_for_rank(
    spec: TrainSpec | FinetuneSpec, *, on_gpu: bool, local_world_size: int, cpus: int
) -> int | None:
    """The thread count a rank should use; None to leave it as it is."""
    if not on_gpu or not offloads_to_host(spec):
        return None
    entrypoint = entrypoint_of(spec)
    if entrypoint is not None and "OMP_NUM_THREADS" in entrypoint.env:
        return None  # the job's own choice
    reserved = int(spec.resources.cpus_per_worker)
    return max(1, reserved, cpus // max(1, local_world_size))


def use_threads(threads: int | None) -> None:
    if threads is None:
        return
    # Libraries that start their own OpenMP pools (DeepSpeed's CPU Adam) read
    # the variable; torch's pool is set directly.
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
