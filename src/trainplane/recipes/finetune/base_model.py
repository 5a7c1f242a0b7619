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

from trainplane.jobs.precision import loaded_precision
from trainplane.jobs.spec import Method

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
    """The dtype the base model is loaded in (the rule the memory estimate
    counts too: jobs.precision.loaded_precision)."""
    loaded = loaded_precision(precision, lora=lora, strategy=strategy)
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(loaded, torch.float32)


def numel(parameter: torch.nn.Parameter) -> int:
    """Its whole size, also when ZeRO-3 left this rank only a share."""
    return int(getattr(parameter, "ds_numel", parameter.numel()))


def building_on_meta() -> bool:
    """Whether new tensors land on the meta device here (a ``torch.device``
    context or default device)."""
    return torch.empty(0).device.type == "meta"


def load_base(
    folder: str, *, dtype: torch.dtype = torch.float32, gradient_checkpointing: bool = False
) -> torch.nn.Module:
    """The base model in ``dtype``. Transformers builds it on the meta device
    (or, under ZeRO-3, partitioned) and fills it from the files, so a rank
    holds at most one copy of the weights, in ``dtype``. Built on the meta
    device (FSDP2's ranks but 0, see TrainContext.model_init) it is the
    architecture alone, from config.json: the strategy fills it from rank 0."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if building_on_meta():
        # from_pretrained refuses a meta device: it would read the weights.
        config = AutoConfig.from_pretrained(folder)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    model.config.use_cache = False  # no KV cache while training
    if gradient_checkpointing:
        # Non-reentrant: gradients reach LoRA adapters even though the frozen
        # embeddings' outputs do not require grad.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def with_lora(model: torch.nn.Module, method: Method) -> torch.nn.Module:
    """LoRA adapters on ``model`` when ``method.type`` is lora (only they
    train then; peft keeps them fp32 on a 16-bit base); else ``model``.
    The spec fills r, alpha and dropout for lora (jobs.spec.Method)."""
    if method.type != "lora":
        return model
    from peft import LoraConfig, get_peft_model

    assert method.r is not None and method.alpha is not None and method.dropout is not None
    config = LoraConfig(
        r=method.r,
        lora_alpha=method.alpha,
        lora_dropout=method.dropout,
        target_modules=method.target_modules or "all-linear",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)
