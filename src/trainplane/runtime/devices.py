"""Which GPUs each rank's process sees: torchrun's rule, one for every path.

Ray gives each one-GPU worker a ``CUDA_VISIBLE_DEVICES`` of its own GPU alone,
so ``cuda:LOCAL_RANK`` is out of range on every rank but local rank 0 and
unmodified torchrun or Accelerate scripts crash. Under torchrun every process
of a node sees the node's GPUs and ``LOCAL_RANK`` picks one. Here every rank
sees the GPUs Ray gave the ranks of its node, in local-rank order, so the
``LOCAL_RANK``-th of them is its own. A command's gang (runtime.workers) and
a train function's Ray Train workers (runtime.ray_train) both apply
:func:`node_device_lists`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class RankPlacement:
    """Where one rank runs and which GPUs Ray gave it (ids as Ray names them:
    the node's own ``CUDA_VISIBLE_DEVICES`` numbering). ``node`` is the node
    as the caller counts local ranks over it (Ray Train: its IP address)."""

    node: str
    local_rank: int
    gpu_ids: tuple[str, ...]


def node_device_lists(placements: Sequence[RankPlacement]) -> list[str | None]:
    """For each rank, in the order given: the ``CUDA_VISIBLE_DEVICES`` its
    process gets, the GPUs of every rank on its node joined in local-rank
    order; None for a rank whose node has no GPUs (a cpu cluster)."""
    by_node: dict[str, list[RankPlacement]] = defaultdict(list)
    for placement in placements:
        by_node[placement.node].append(placement)
    lists: dict[str, str | None] = {}
    for node, ranks in by_node.items():
        ordered = sorted(ranks, key=lambda p: p.local_rank)
        ids = [gpu for p in ordered for gpu in p.gpu_ids]
        local_ranks = [p.local_rank for p in ordered]
        if ids and local_ranks != list(range(len(ordered))):
            # LOCAL_RANK indexes the list: each must pick a GPU of its own.
            raise ValueError(f"node {node}: local ranks {local_ranks} are not 0..n-1")
        lists[node] = ",".join(ids) if ids else None
    return [lists[p.node] for p in placements]


def gpu_order(gpu_ids: Sequence[str]) -> tuple[int, ...] | tuple[str, ...]:
    """Sort key of a worker by its GPUs: numerically where Ray numbers them
    (so 10 follows 9), else by name."""
    try:
        return tuple(sorted(int(i) for i in gpu_ids))
    except ValueError:
        return tuple(sorted(gpu_ids))


def visible_devices_env(devices: str | None) -> dict[str, str]:
    """The variable to set on a rank's process; nothing without GPUs."""
    return {VISIBLE_DEVICES: devices} if devices else {}


def own_gpu_ids() -> tuple[str, ...]:
    """The GPUs Ray gave the calling worker (inside a Ray task or actor)."""
    import ray

    ids = ray.get_runtime_context().get_accelerator_ids().get("GPU", [])
    return tuple(str(i) for i in ids)
