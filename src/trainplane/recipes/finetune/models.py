"""Loading the base model and tokenizer, LoRA, and the local copy of a base
model kept on S3."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

CACHE_ENV = "TRAINPLANE_CACHE_DIR"


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "trainplane")


def local_folder(location: str) -> str:
    """A local folder holding the model at ``location``. An s3:// model is
    downloaded once per machine into the cache; concurrent ranks each
    download into a scratch folder and the first rename wins."""
    if not location.startswith("s3://"):
        return location
    from trainplane.storage.backends import open_storage

    name = hashlib.sha256(location.encode()).hexdigest()[:24]
    target = cache_root() / "models" / name
    if (target / "config.json").exists():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        open_storage(location).get_tree("", scratch)
        try:
            os.rename(scratch, target)
        except OSError:
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return str(target)


def load_tokenizer(folder: str) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token_id is None:
        # Padding positions are masked out of attention and loss; any id does.
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return tokenizer


def weights_dtype(precision: str, *, lora: bool, strategy: str) -> torch.dtype:
    """The dtype the base model is loaded in. The training dtype (bf16 by
    default on GPUs) where no fp32 copy of the loaded weights is needed: a
    LoRA base does not train, and DeepSpeed keeps its own fp32 master copy in
    the optimizer. A full fine-tune under DDP or FSDP2 steps the module's own
    weights, so they stay fp32 (the strategy casts for the forward)."""
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if low is None or not (lora or strategy == "deepspeed"):
        return torch.float32
    return low


def numel(parameter: torch.nn.Parameter) -> int:
    """Its whole size, also when ZeRO-3 left this rank only a share."""
    return int(getattr(parameter, "ds_numel", parameter.numel()))


def load_base(
    folder: str, *, dtype: torch.dtype = torch.float32, gradient_checkpointing: bool = False
) -> torch.nn.Module:
    """The base model in ``dtype``. Transformers builds it on the meta device
    (or, under ZeRO-3, partitioned) and fills it from the files, so a rank
    holds at most one copy of the weights, in ``dtype``."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    model.config.use_cache = False  # no KV cache while training
    if gradient_checkpointing:
        # Non-reentrant: gradients reach LoRA adapters even though the frozen
        # embeddings' outputs do not require grad.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def with_lora(model: torch.nn.Module, method: dict[str, Any]) -> torch.nn.Module:
    """LoRA adapters on ``model`` when ``method.type`` is lora (only they
    train then; peft keeps them fp32 on a 16-bit base); else ``model``."""
    if method.get("type") != "lora":
        return model
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=int(method["r"]),
        lora_alpha=float(method["alpha"]),
        lora_dropout=float(method.get("dropout") or 0.0),
        target_modules=method.get("target_modules") or "all-linear",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)
