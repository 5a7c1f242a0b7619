"""Tiny Hugging Face models and JSONL datasets built locally (nothing is
downloaded): a random-init Llama-architecture causal LM with a byte-level BPE
tokenizer trained on the dataset's own text."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def arithmetic_rows(start: int, stop: int) -> list[dict[str, str]]:
    """``prompt``/``completion`` rows a tiny model can learn something from."""
    return [
        {"prompt": f"what is {i} plus {i}?", "completion": f" {2 * i}"} for i in range(start, stop)
    ]


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def build_tiny_llama(
    folder: Path,
    *,
    hidden_size: int = 64,
    layers: int = 2,
    texts: Iterable[str] | None = None,
    seed: int = 0,
) -> Path:
    """Save a random-init LlamaForCausalLM and its tokenizer in ``folder``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    corpus = list(texts or (f"{r['prompt']}{r['completion']}" for r in arithmetic_rows(0, 400)))
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        corpus,
        trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>", "<pad>"]),
    )
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    config = LlamaConfig(
        vocab_size=len(wrapped),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        bos_token_id=wrapped.bos_token_id,
        eos_token_id=wrapped.eos_token_id,
        pad_token_id=wrapped.pad_token_id,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    wrapped.save_pretrained(folder)
    return folder
