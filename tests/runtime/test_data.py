"""The resumable, rank-sharded data loader."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import TensorDataset

from trainplane.runtime.data import ResumableLoader

pytestmark = pytest.mark.ray_free

DATASET = TensorDataset(torch.arange(103))


def loader(rank: int, world: int, batch: int = 4, **kwargs: object) -> ResumableLoader:
    return ResumableLoader(DATASET, batch_size=batch, rank=rank, world_size=world, **kwargs)


def flat(batches: list) -> list[int]:
    return [int(x) for (batch,) in batches for x in batch]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_ranks_split_an_epoch_without_overlap(world: int) -> None:
    shares = [flat(list(loader(rank, world))) for rank in range(world)]
    seen = list(itertools.chain(*shares))
    assert len(seen) == len(set(seen))  # no sample twice in an epoch
    assert len({len(share) for share in shares}) == 1  # every rank as many
    assert len(seen) > 103 - world * 4 * 2  # at most the ragged end is dropped


def test_the_order_changes_per_epoch_and_repeats_per_seed() -> None:
    first = loader(0, 2, seed=7)
    epoch0, epoch1 = flat(list(first)), flat(list(first))
    assert epoch0 != epoch1
    again = loader(0, 2, seed=7)
    assert flat(list(again)) == epoch0
    assert flat(list(loader(0, 2, seed=8))) != epoch0


def test_a_restored_loader_continues_where_the_saved_one_was() -> None:
    original = loader(1, 2)
    stream = original.forever()
    for _ in range(17):  # into the second epoch
        next(stream)
    state = original.state_dict()
    expected = [next(stream) for _ in range(20)]

    resumed = loader(1, 2)
    resumed.load_state_dict(state)
    got = list(itertools.islice(resumed.forever(), 20))
    assert flat(got) == flat(expected)


def test_forever_refuses_a_dataset_smaller_than_a_batch() -> None:
    tiny = ResumableLoader(TensorDataset(torch.arange(3)), batch_size=4, rank=0, world_size=1)
    with pytest.raises(ValueError, match="fewer samples than one batch"):
        next(tiny.forever())


def test_iterating_leaves_the_global_random_stream_alone() -> None:
    """Dropout draws from the global RNG, which checkpoints save and restore:
    a resumed run that starts its loader mid-epoch must draw the same numbers
    as the run that never stopped."""
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    source = loader(0, 1, shuffle=True)
    next(iter(source))
    list(loader(0, 1, shuffle=False))
    assert torch.equal(torch.rand(3), expected)
