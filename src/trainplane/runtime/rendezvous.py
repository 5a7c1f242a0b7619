"""How a Ray Train worker group's ranks learn what their rank processes need
from each other, through Ray alone.

Rank 0 picks the rank processes' rendezvous address and starts a directory
actor; Ray Train's own broadcast (its synchronization actor, no process group)
hands both to every worker. Each worker then tells the directory where it runs
and which GPU Ray gave it, and gets back every rank's, from which
runtime.devices derives what its process sees. No torch process group, NCCL
communicator or CUDA context is created in the workers: the rank processes'
own process group is the first.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import ray

from trainplane.net import free_port
from trainplane.runtime.devices import RankPlacement, node_device_lists, own_gpu_ids


@dataclass(frozen=True)
class Meeting:
    """What one rank's process is started with."""

    master_addr: str
    master_port: int
    visible_devices: str | None  # CUDA_VISIBLE_DEVICES; None without GPUs


@ray.remote(num_cpus=0)
class RankDirectory:
    """Collects every rank's placement; answers each rank once all have come.
    One per worker group start, owned by its rank 0: it dies with that worker."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.placements: dict[int, RankPlacement] = {}
        self.complete = asyncio.Event()

    async def join(self, rank: int, placement: RankPlacement) -> list[RankPlacement]:
        self.placements[rank] = placement
        if len(self.placements) == self.world_size:
            self.complete.set()
        await self.complete.wait()
        return [self.placements[r] for r in range(self.world_size)]


def meet(context: Any, *, on_gpu: bool = True) -> Meeting:
    """Called by every worker of the group (``context``: ray.train.get_context()).
    Without GPUs (``on_gpu`` False) there are no devices to agree on: rank
    0's address is all the ranks need, and no directory actor is started (a
    fresh process, on the path to the first step)."""
    from ray.train.collective import broadcast_from_rank_zero

    rank = context.get_world_rank()
    if not on_gpu:
        address = (ray.util.get_node_ip_address(), free_port("")) if rank == 0 else None
        master_addr, master_port = broadcast_from_rank_zero(address)
        return Meeting(master_addr, master_port, None)
    offer = None
    if rank == 0:
        # "DEFAULT": outside the worker group's placement group, whose
        # bundles hold the workers' resources only.
        directory = RankDirectory.options(scheduling_strategy="DEFAULT").remote(
            context.get_world_size()
        )
        offer = (directory, ray.util.get_node_ip_address(), free_port(""))
    directory, master_addr, master_port = broadcast_from_rank_zero(offer)
    mine = RankPlacement(
        # Ray Train counts local ranks per node address.
        node=ray.util.get_node_ip_address(),
        local_rank=context.get_local_rank(),
        gpu_ids=own_gpu_ids(),
    )
    everyone = ray.get(directory.join.remote(rank, mine))
    return Meeting(master_addr, master_port, node_device_lists(everyone)[rank])
