"""Strategy details that show in a world of one, in this process: precision,
gradient accumulation, clipping, DeepSpeed's generated config."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.runtime.test_checkpointing import run
from trainplane.jobs.spec import DeepSpeedOptions
from trainplane.runtime.strategies.deepspeed import deepspeed_config

pytestmark = [pytest.mark.ray_free, pytest.mark.usefixtures("one_rank_group")]


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_bf16_trains_like_fp32(strategy: str, tmp_path: Path) -> None:
    fp32, _ = run(str(tmp_path / "a"), tmp_path, steps=30, checkpoint={}, strategy=strategy)
    bf16, _ = run(
        str(tmp_path / "b"),
        tmp_path,
        steps=30,
        checkpoint={},
        strategy=strategy,
        precision="bf16",
        name="bf16",
    )
    assert bf16[30] < 0.85 * bf16[1]
    assert bf16[30] == pytest.approx(fp32[30], abs=0.05)
    assert bf16 != fp32  # the low precision did apply


def test_gradient_accumulation_matches_the_whole_batch(tmp_path: Path) -> None:
    # 4 micro-batches of 16 are the same 64 samples as one batch of 64: the
    # updates, hence the weights, must be the same.
    _, whole = run(str(tmp_path / "a"), tmp_path, steps=10, checkpoint={}, name="whole")
    _, accumulated = run(
        str(tmp_path / "b"),
        tmp_path,
        steps=10,
        checkpoint={},
        name="accumulated",
        optimization={"grad_accum": 4},
    )
    assert accumulated.grad_accum == 4 and accumulated.global_step == 10
    expected = whole.unwrap().state_dict()
    for name, tensor in accumulated.unwrap().state_dict().items():
        assert torch.allclose(tensor, expected[name], rtol=1e-4, atol=1e-6), name


def test_gradient_clipping_is_applied(tmp_path: Path) -> None:
    free, _ = run(str(tmp_path / "a"), tmp_path, steps=5, checkpoint={}, name="free")
    clipped, _ = run(
        str(tmp_path / "b"),
        tmp_path,
        steps=5,
        checkpoint={},
        name="clipped",
        optimization={"max_grad_norm": 1e-6},
    )
    assert free[1] == clipped[1]  # the first loss is before any update
    # With a vanishing gradient norm AdamW still moves (it normalises), but
    # the trajectory differs from the unclipped one.
    assert free[5] != clipped[5]


def test_ddp_in_a_world_of_one_trains_without_ddp_and_resumes(tmp_path: Path) -> None:
    # No DistributedDataParallel around a world of one (no gradient buckets to
    # fill and all-reduce with itself); its checkpoints resume as before.
    policy = {"every_steps": 3}
    first, ctx = run(str(tmp_path / "a"), tmp_path, steps=6, checkpoint=policy)
    prepared = ctx._prepared().model
    assert not isinstance(prepared, torch.nn.parallel.DistributedDataParallel)
    assert prepared.module is ctx.unwrap()  # as DDP's, for code that reaches for it
    resumed, again = run(str(tmp_path / "a"), tmp_path, steps=8, checkpoint=policy, name="b")
    assert again.resumed_from is not None and again.resumed_from.endswith("/step-6")
    assert sorted(resumed) == [7, 8] and resumed[8] < first[1]


def test_mixed_precision_leaves_the_users_module_as_it_was(tmp_path: Path) -> None:
    # The autocast goes on the wrapper's forward: an export of the user's
    # module must not trace a bf16 forward.
    _, ctx = run(str(tmp_path / "a"), tmp_path, steps=2, checkpoint={}, precision="bf16")
    assert "forward" not in vars(ctx.unwrap())
    assert "forward" in vars(ctx._prepared().model)


def test_the_users_deepspeed_config_is_merged_over_the_generated_one() -> None:
    config = deepspeed_config(
        DeepSpeedOptions(
            stage=3,
            offload_optimizer="cpu",
            config={"zero_optimization": {"overlap_comm": True}, "steps_per_print": 10},
        ),
        precision="bf16",
        micro_batch_size=4,
        grad_accum=2,
        max_grad_norm=1.0,
        on_gpu=True,
    )
    zero = config["zero_optimization"]
    assert zero["stage"] == 3 and zero["overlap_comm"] is True
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert "offload_param" not in zero
    assert config["bf16"] == {"enabled": True} and "fp16" not in config
    assert config["train_micro_batch_size_per_gpu"] == 4
    assert config["gradient_accumulation_steps"] == 2
    assert config["gradient_clipping"] == 1.0
    assert config["steps_per_print"] == 10
