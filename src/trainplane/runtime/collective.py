"""The few collectives the runtime's own bookkeeping needs (checkpoints, the
model export): no-ops in a world of one or without a process group."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist


def _distributed() -> bool:
    return dist.is_initialized() and dist.get_world_size() > 1


def barrier() -> None:
    if _distributed():
        dist.barrier()


def gather(value: Any) -> list[Any]:
    """Every rank's ``value``, in rank order, on every rank."""
    if not _distributed():
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def broadcast(value: Any) -> Any:
    """Rank 0's ``value`` on every rank."""
    if not _distributed():
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]
