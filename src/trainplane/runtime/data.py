"""Data loading that shards across ranks and can resume mid-epoch.

The order of samples depends only on the seed, the epoch and the world size,
never on a process's RNG, so a resumed run sees exactly the batches an
uninterrupted run would have seen. The position (epoch, batches consumed in it)
is part of every checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler


class ShardSampler(Sampler[int]):
    """This rank's share of one epoch's permutation, from a chosen batch on."""

    def __init__(
        self,
        length: int,
        *,
        rank: int,
        world_size: int,
        batch_size: int,
        shuffle: bool,
        seed: int,
        drop_last: bool,
    ) -> None:
        self.length = length
        self.rank = rank
        self.world_size = world_size
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self.start_batch = 0

    def epoch_indices(self) -> list[int]:
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.length, generator=generator).tolist()
        else:
            order = list(range(self.length))
        if self.drop_last:
            usable = len(order) - len(order) % self.world_size
            order = order[:usable]
        else:  # pad by wrapping around so every rank gets as many samples
            missing = (-len(order)) % self.world_size
            order = order + order[:missing]
        mine = order[self.rank :: self.world_size]
        if self.drop_last:
            mine = mine[: len(mine) - len(mine) % self.batch_size]
        return mine

    def batches_per_epoch(self) -> int:
        count = len(self.epoch_indices())
        return count // self.batch_size if self.drop_last else -(-count // self.batch_size)

    def __iter__(self) -> Iterator[int]:
        return iter(self.epoch_indices()[self.start_batch * self.batch_size :])

    def __len__(self) -> int:
        return max(0, len(self.epoch_indices()) - self.start_batch * self.batch_size)


class ResumableLoader:
    """Iterate it for the rest of the current epoch; ``forever()`` crosses epochs.

    Iterating again starts the next epoch, like a DataLoader with
    ``set_epoch`` called for you.
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        *,
        batch_size: int,
        rank: int,
        world_size: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        tokens_per_sample: int | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.world_size = world_size
        self.tokens_per_sample = tokens_per_sample
        self.sampler = ShardSampler(
            len(dataset),  # type: ignore[arg-type]
            rank=rank,
            world_size=world_size,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
        )
        # A DataLoader draws a seed for its workers each time it is iterated;
        # from the global RNG, that draw would shift the random stream of the
        # training (dropout) whenever a resumed run starts an epoch mid-way.
        self._seeds = torch.Generator()
        self._seeds.manual_seed(seed)
        self.loader = DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=self.sampler,
            drop_last=drop_last,
            collate_fn=collate_fn,
            num_workers=num_workers,
            pin_memory=pin_memory,
            generator=self._seeds,
        )
        self.epoch = 0
        self.consumed = 0  # batches of the current epoch already handed out

    def __len__(self) -> int:
        return self.sampler.batches_per_epoch()

    def __iter__(self) -> Iterator[Any]:
        self._seeds.manual_seed(self.sampler.seed + self.epoch)
        self.sampler.epoch = self.epoch
        self.sampler.start_batch = self.consumed
        for batch in self.loader:
            self.consumed += 1
            yield batch
        self.epoch += 1
        self.consumed = 0

    def forever(self) -> Iterator[Any]:
        while True:
            produced = False
            for batch in self:
                produced = True
                yield batch
            if not produced:
                raise ValueError("the dataset has fewer samples than one batch per rank")

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "consumed": self.consumed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch = int(state["epoch"])
        self.consumed = int(state["consumed"])
