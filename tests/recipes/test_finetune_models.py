"""How the fine-tune recipe builds its model: the dtype it loads the base in,
and gradient checkpointing when the spec asks for it, on a tiny random-init
Llama saved locally."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.factories import finetune_spec
from tests.runtime.test_safe_resume import _no_deepspeed_leftovers  # noqa: F401
from trainplane.jobs.memory import StrategyChoice, Workload, _frozen_bytes
from trainplane.jobs.spec import Method, parse_spec
from trainplane.recipes.finetune import base_model, recipe
from trainplane.runtime.context import TrainContext
from trainplane.testing.tiny_models import arithmetic_rows, build_tiny_llama, write_jsonl

pytestmark = pytest.mark.ray_free

LORA = {"type": "lora", "r": 4, "alpha": 8}


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


@pytest.mark.parametrize(
    ("precision", "lora", "strategy", "expected"),
    [
        ("bf16", True, "ddp", torch.bfloat16),  # the base does not train
        ("bf16", False, "deepspeed", torch.bfloat16),  # the engine keeps an fp32 master
        ("bf16", False, "fsdp", torch.float32),  # the module's weights are the master
        ("bf16", False, "ddp", torch.float32),
        ("fp16", True, "fsdp", torch.float16),
        ("fp32", True, "deepspeed", torch.float32),
    ],
)
def test_the_base_loads_in_the_training_dtype_unless_its_weights_are_the_master(
    precision: str, lora: bool, strategy: str, expected: torch.dtype
) -> None:
    assert base_model.weights_dtype(precision, lora=lora, strategy=strategy) == expected
    # The memory estimate counts a LoRA base by the same rule.
    if lora:
        workload = Workload(precision, lora=True)
        choice = StrategyChoice(strategy, stage=2 if strategy == "deepspeed" else None)
        assert _frozen_bytes(workload, choice) == expected.itemsize


def test_a_bf16_base_with_gradient_checkpointing_trains_its_fp32_adapters(tiny_llama: Path):
    model = base_model.with_lora(
        base_model.load_base(str(tiny_llama), dtype=torch.bfloat16, gradient_checkpointing=True),
        Method.model_validate({**LORA, "dropout": 0.0}),
    )
    base = {p.dtype for n, p in model.named_parameters() if "lora_" not in n}
    adapters = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert base == {torch.bfloat16} and adapters
    assert {p.dtype for p in adapters.values()} == {torch.float32}
    assert model.is_gradient_checkpointing
    before = {n: p.detach().clone() for n, p in adapters.items()}
    optimizer = torch.optim.AdamW(adapters.values(), lr=1e-2)
    tokens = torch.randint(4, 100, (2, 16))
    model.train()
    model(input_ids=tokens, labels=tokens).loss.backward()
    optimizer.step()
    # Through the recomputed layers, every adapter got a gradient and moved.
    assert all(p.grad is not None for p in adapters.values())
    assert any(not torch.equal(p, before[n]) for n, p in adapters.items() if "lora_B" in n)


ZERO3 = {"type": "deepspeed", "deepspeed": {"stage": 3}}


@pytest.mark.usefixtures("one_rank_group", "_no_deepspeed_leftovers")
@pytest.mark.parametrize(
    ("checkpointing", "strategy"), [(True, ZERO3), (False, {"type": "ddp"})], ids=["zero3", "ddp"]
)
def test_the_recipe_enables_gradient_checkpointing_when_the_spec_asks(
    checkpointing: bool, strategy: dict[str, Any], tiny_llama: Path, tmp_path: Path
) -> None:
    rows = write_jsonl(tmp_path / "train.jsonl", arithmetic_rows(0, 16))
    document: dict[str, Any] = finetune_spec(
        base_model=str(tiny_llama),
        dataset={"train": str(rows)},
        method=LORA,
        strategy=strategy,
        precision="bf16",
        model={"activation_checkpointing": checkpointing},
        hyperparameters={"max_steps": 1, "micro_batch_size": 2, "max_seq_len": 32},
    )
    context = TrainContext(
        parse_spec(document), rank=0, local_rank=0, world_size=1, device=torch.device("cpu")
    )
    metrics = recipe.train(context)
    assert context.global_step == 1 and torch.isfinite(torch.tensor(metrics["loss"]))
    model = context.unwrap()
    assert model.is_gradient_checkpointing is checkpointing
    base = [p for n, p in model.named_parameters() if "lora_" not in n]
    assert {p.dtype for p in base} == {torch.bfloat16}
    # Under ZeRO-3 the base was built partitioned (ctx.model_init), not whole.
    assert all(hasattr(p, "ds_id") for p in base) is (strategy is ZERO3)
