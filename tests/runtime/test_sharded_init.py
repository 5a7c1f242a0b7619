"""FSDP2's shard-by-shard materialization (runtime/strategies/sharded_init) in
a world of one: a model on the meta device everywhere, and what is refused.
Rank 0's weights filling the other ranks' shards: tests/runtime/test_two_ranks.py."""

from __future__ import annotations

import math

import pytest
import torch

from trainplane.jobs.spec import Strategy
from trainplane.runtime.strategies import StrategySettings, make_runner

pytestmark = pytest.mark.ray_free


def _settings() -> StrategySettings:
    return StrategySettings(
        strategy=Strategy(type="fsdp"),
        precision="fp32",
        device=torch.device("cpu"),
        rank=0,
        local_rank=0,
        world_size=1,
    )


@pytest.mark.usefixtures("one_rank_group")
def test_a_model_on_the_meta_device_everywhere_is_initialized_by_its_modules() -> None:
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64))
    prepared, _ = make_runner(_settings()).prepare(model, lambda p: torch.optim.SGD(p, lr=0.1))
    weight = prepared[0].weight.full_tensor()
    assert not weight.is_meta and torch.isfinite(weight).all()
    assert 0 < weight.abs().max() <= 1 / math.sqrt(64)  # nn.Linear's own init
    assert torch.equal(prepared[1].weight.full_tensor(), torch.ones(64))


class _Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gain = torch.nn.Parameter(torch.ones(4))


@pytest.mark.usefixtures("one_rank_group")
def test_a_meta_model_without_an_initializer_is_refused_naming_the_module() -> None:
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), _Scaled())
    with pytest.raises(ValueError, match=r"no reset_parameters\(\).*: 1;"):
        make_runner(_settings()).prepare(model, lambda p: torch.optim.SGD(p, lr=0.1))


@pytest.mark.usefixtures("one_rank_group")
def test_rank_0_with_part_of_its_model_on_the_meta_device_is_refused() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4, device="meta"))
    with pytest.raises(ValueError, match="some tensors on the meta device on rank 0"):
        make_runner(_settings()).prepare(model, lambda p: torch.optim.SGD(p, lr=0.1))
