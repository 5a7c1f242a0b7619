"""Rows to fixed-length token blocks, the same on every rank.

Each row becomes ``bos + tokens + eos``. For ``prompt``/``completion`` rows the
prompt's tokens are labelled ``IGNORE``, so the loss is on the completion only.
Then either every row is cut or padded to ``max_seq_len`` (padding: its
labels are ``IGNORE`` and its attention mask is 0), or, with packing, all rows
are concatenated and cut into blocks of ``max_seq_len`` (fewer wasted tokens
on short rows; the last partial block is padded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

IGNORE = -100  # the label the Hugging Face losses skip


@dataclass
class Encoded:
    input_ids: list[int]
    labels: list[int]


class TokenBlocks(torch.utils.data.Dataset):
    """``input_ids``, ``attention_mask`` and ``labels``, each [rows, max_seq_len]."""

    def __init__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor):
        self.input_ids = input_ids
        self.attention_mask = attention_mask
        self.labels = labels

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {
            "input_ids": self.input_ids[index],
            "attention_mask": self.attention_mask[index],
            "labels": self.labels[index],
        }

    @property
    def trained_tokens(self) -> int:
        """Tokens that carry a label (what the loss is over)."""
        return int((self.labels != IGNORE).sum())


def encode(row: dict[str, str], tokenizer: Any) -> Encoded:
    def ids(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    if "text" in row:
        tokens = bos + ids(row["text"]) + eos
        return Encoded(tokens, list(tokens))
    prompt = bos + ids(row["prompt"])
    completion = ids(row["completion"]) + eos
    return Encoded(prompt + completion, [IGNORE] * len(prompt) + completion)


def pad_id(tokenizer: Any) -> int:
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0):
        if candidate is not None:
            return int(candidate)
    return 0  # unreachable: 0 is not None


def token_blocks(
    rows: list[dict[str, str]], tokenizer: Any, *, max_seq_len: int, packing: bool
) -> tuple[TokenBlocks, int]:
    """The rows as token blocks, and how many rows were dropped because
    nothing of their completion fits in ``max_seq_len``."""
    encoded = [encode(row, tokenizer) for row in rows]
    dropped = 0
    if packing:
        stream_ids = [t for e in encoded for t in e.input_ids]
        stream_labels = [t for e in encoded for t in e.labels]
        pieces = [
            Encoded(stream_ids[i : i + max_seq_len], stream_labels[i : i + max_seq_len])
            for i in range(0, len(stream_ids), max_seq_len)
        ]
    else:
        pieces = []
        for e in encoded:
            piece = Encoded(e.input_ids[:max_seq_len], e.labels[:max_seq_len])
            if all(label == IGNORE for label in piece.labels):
                dropped += 1
                continue
            pieces.append(piece)
    pieces = [p for p in pieces if any(label != IGNORE for label in p.labels)]
    filler = pad_id(tokenizer)
    count = len(pieces)
    input_ids = torch.full((count, max_seq_len), filler, dtype=torch.long)
    labels = torch.full((count, max_seq_len), IGNORE, dtype=torch.long)
    mask = torch.zeros((count, max_seq_len), dtype=torch.long)
    for i, piece in enumerate(pieces):
        length = len(piece.input_ids)
        input_ids[i, :length] = torch.tensor(piece.input_ids)
        labels[i, :length] = torch.tensor(piece.labels)
        mask[i, :length] = 1
    return TokenBlocks(input_ids, mask, labels), dropped
