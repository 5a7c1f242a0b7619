"""The few collectives the runtime's own bookkeeping needs (checkpoints, the
model export): no-ops in a world of one or without a process group. They run
on the bookkeeping group (``runtime.process_groups``) when there is one, so
ranks waiting for rank 0's uploads wait on gloo, outside NCCL's watchdog."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from trainplane.runtime.process_groups import bookkeeping_group


def _distributed() -> bool:
    return dist.is_initialized() and dist.get_world_size() > 1


def barrier() -> None:
    if _distributed():
        dist.barrier(group=bookkeeping_group())


def gather(value: Any) -> list[Any]:
    """Every rank's ``value``, in rank order, on every rank."""
    if not _distributed():
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value, group=bookkeeping_group())
    return gathered


def broadcast(value: Any) -> Any:
    """Rank 0's ``value`` on every rank."""
    if not _distributed():
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0, group=bookkeeping_group())
    return holder[0]
