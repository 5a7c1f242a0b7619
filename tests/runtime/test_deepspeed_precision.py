"""DeepSpeed in bf16, in this process as a world of one: the example MLP
(which feeds fp32 inputs) trains, and the exported weights are the
optimizer's fp32 master copy, not the 16-bit weights the forward uses."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.runtime.test_checkpointing import run
from tests.runtime.test_safe_resume import _no_deepspeed_leftovers  # noqa: F401 (autouse)

pytestmark = [pytest.mark.ray_free, pytest.mark.usefixtures("one_rank_group")]


def held_by_bf16(tensor: torch.Tensor) -> torch.Tensor:
    return tensor == tensor.to(torch.bfloat16).float()


def test_zero2_bf16_trains_the_fp32_example_and_exports_the_fp32_master(tmp_path: Path) -> None:
    losses, context = run(
        str(tmp_path / "ckpt"),
        tmp_path,
        steps=8,
        checkpoint={},
        strategy="deepspeed",
        precision="bf16",
    )
    assert sorted(losses) == list(range(1, 9)) and losses[8] < losses[1]
    module = context.unwrap()
    assert {p.dtype for p in module.parameters()} == {torch.bfloat16}  # the engine's copy
    state = context._prepared().full_state_dict()
    assert state is not None and state.keys() == module.state_dict().keys()
    for name, weights in module.named_parameters():
        assert state[name].dtype == torch.float32, name
        # The 16-bit weights are the master rounded; the export is the master.
        assert torch.equal(state[name].to(torch.bfloat16), weights.detach()), name
    assert not all(held_by_bf16(state[name]).all() for name, _ in module.named_parameters())
