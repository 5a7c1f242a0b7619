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


def load_model(folder: str, method: dict[str, Any]) -> torch.nn.Module:
    """The base model in fp32 (the strategy casts for mixed precision), with
    LoRA adapters when ``method.type`` is lora; only they train then."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.config.use_cache = False  # no KV cache while training
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
