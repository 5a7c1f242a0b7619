"""The fine-tune phase of tests/runtime/two_ranks.py (2 ranks, gloo): rank 0
saves a tiny random-init Llama and a dataset, then each rank records

- ``build_peak``: the peak of resident memory while the recipe builds its
  LoRA model under FSDP2 (bf16); ``full_copy_peak``: the same, loading the
  whole base as every rank did before; ``dtypes``: what each parameter was
  built in, ``built_on_meta``: whether all of it was on the meta device;
- ``fsdp_vs_ddp``: after training the recipe under FSDP2 (rank 1 on the meta
  device) and under DDP (full copies everywhere, the reference), per tensor
  of rank 0's full state dict, the largest difference between the two, and
  ``adapters_moved``: whether training changed the LoRA B matrices (zero at
  first).
"""

from __future__ import annotations

import copy
import gc
import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from trainplane.jobs.spec import Method, parse_spec
from trainplane.recipes.finetune import base_model, recipe
from trainplane.runtime.context import TrainContext
from trainplane.testing.memory_probe import (
    _peak_resident_bytes,
    _reset_peak_resident,
    _resident_bytes,
)
from trainplane.testing.tiny_models import arithmetic_rows, build_tiny_llama, write_jsonl

# Big enough (about 21M parameters) that a copy of it stands out of the noise
# in a rank's resident memory.
LLAMA = {"hidden_size": 512, "layers": 8}


def write_spec(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    document = {
        "kind": "finetune",
        "name": "two-ranks",
        "base_model": str(build_tiny_llama(folder / "model", **LLAMA)),
        "dataset": {"train": str(write_jsonl(folder / "train.jsonl", arithmetic_rows(0, 16)))},
        "method": {"type": "lora", "r": 4, "alpha": 8},
        "hyperparameters": {"max_steps": 2, "micro_batch_size": 2, "max_seq_len": 32},
        "resources": {"gpus": 2},
    }
    spec = parse_spec(document).model_dump(mode="json")
    (folder / "spec.json").write_text(json.dumps(spec))


def _context(spec: dict[str, Any], rank: int, strategy: str, precision: str) -> TrainContext:
    spec = {**copy.deepcopy(spec), "strategy": {"type": strategy}, "precision": precision}
    return TrainContext(
        parse_spec(spec), rank=rank, local_rank=rank, world_size=2, device=torch.device("cpu")
    )


def _peak_while(build: Any) -> tuple[torch.nn.Module, int]:
    gc.collect()
    before = _resident_bytes()
    _reset_peak_resident()
    model = build()
    return model, _peak_resident_bytes() - before


def _trained(spec: dict[str, Any], rank: int, strategy: str) -> dict[str, torch.Tensor]:
    ctx = _context(spec, rank, strategy, "fp32")
    recipe.train(ctx)
    state = get_model_state_dict(
        ctx.unwrap(), options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    ctx.close()
    return state


def run(out: Path, rank: int) -> dict[str, Any]:
    if rank == 0:
        write_spec(out)
    else:
        from peft import get_peft_model  # noqa: F401  (imported while rank 0 writes)
    dist.barrier()
    spec = json.loads((out / "spec.json").read_text())
    folder = spec["base_model"]
    lora = Method.model_validate(spec["method"])
    ctx = _context(spec, rank, "fsdp", "bf16")
    recipe.build_model(ctx, folder)  # imports transformers and peft first
    model, build_peak = _peak_while(lambda: recipe.build_model(ctx, folder))
    record: dict[str, Any] = {
        "build_peak": build_peak,
        "built_on_meta": all(p.is_meta for p in model.parameters()),
        "dtypes": {name: str(p.dtype) for name, p in model.named_parameters()},
        "model_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
    }
    del model
    dtype = base_model.weights_dtype("bf16", lora=True, strategy="fsdp")
    full, record["full_copy_peak"] = _peak_while(
        lambda: base_model.with_lora(base_model.load_base(folder, dtype=dtype), lora)
    )
    del full
    gc.collect()
    sharded = _trained(spec, rank, "fsdp")
    reference = _trained(spec, rank, "ddp")
    if rank == 0:
        assert sharded.keys() == reference.keys()
        record["fsdp_vs_ddp"] = {
            name: float((sharded[name].double() - reference[name].double()).abs().max())
            for name in reference
        }
        record["adapters_moved"] = all(
            bool(tensor.abs().max() > 0) for name, tensor in sharded.items() if "lora_B" in name
        )
    return record
