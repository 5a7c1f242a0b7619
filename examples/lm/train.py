"""A small decoder-only transformer language model, written once for every
strategy (this folder runs it with FSDP2; ../lm-zero3 with DeepSpeed ZeRO-3).

The corpus is generated from a fixed seed by a sparse Markov chain over the
vocabulary, so the loss has a known floor well below log(vocab) and runs need
no download.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

import trainplane

DEFAULTS = {
    "steps": 40,
    "global_batch": 16,
    "seq_len": 64,
    "vocab": 256,
    "d_model": 128,
    "layers": 2,
    "heads": 4,
    "lr": 3e-3,
    "warmup": 5,
    "sequences": 2048,
    "seed": 0,
    "step_sleep": 0.0,
}


def markov_corpus(sequences: int, length: int, vocab: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    # Each token is followed by one of 4 likely successors.
    successors = torch.randint(0, vocab, (vocab, 4), generator=generator)
    tokens = torch.empty(sequences, length + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, vocab, (sequences,), generator=generator)
    for position in range(1, length + 1):
        choice = torch.randint(0, 4, (sequences,), generator=generator)
        tokens[:, position] = successors[tokens[:, position - 1], choice]
    return TensorDataset(tokens[:, :-1], tokens[:, 1:])


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d_model: int, layers: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.position(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def parameter_count(args: dict) -> int:
    d, layers, vocab, seq = args["d_model"], args["layers"], args["vocab"], args["seq_len"]
    per_block = 12 * d * d + 13 * d
    return layers * per_block + 2 * vocab * d + seq * d + 2 * d


def train_loop(ctx: trainplane.TrainContext) -> dict[str, float]:
    args = {**DEFAULTS, **ctx.args}
    torch.manual_seed(args["seed"])
    corpus = markov_corpus(args["sequences"], args["seq_len"], args["vocab"], args["seed"])
    batch = args["global_batch"] // (ctx.world_size * ctx.grad_accum)
    loader = ctx.data_loader(
        corpus, batch_size=batch, seed=args["seed"], tokens_per_sample=args["seq_len"]
    )
    # Built inside model_init: under ZeRO-3 no rank ever holds the whole model.
    with ctx.model_init():
        model = TinyLM(
            args["vocab"], args["d_model"], args["layers"], args["heads"], args["seq_len"]
        )
    optimizer = torch.optim.AdamW(model.parameters(), lr=args["lr"], weight_decay=0.01)
    steps, warmup = args["steps"], args["warmup"]

    def schedule(step: int) -> float:  # linear warmup, then cosine decay
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    model, optimizer = ctx.prepare(
        model, optimizer, lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    )
    ctx.total_steps = steps
    ctx.restore()
    model.train()
    loss = None
    for inputs, targets in loader.forever():
        if ctx.global_step >= steps:
            break
        inputs, targets = inputs.to(ctx.device), targets.to(ctx.device)
        logits = model(inputs)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))
        ctx.backward(loss)
        if ctx.step():
            # Averaged over the ranks in batches: no collective of its own per step.
            ctx.report({"loss": loss.detach()})
            if args["step_sleep"]:
                time.sleep(args["step_sleep"])
    # A run resumed from its final checkpoint (a worker lost after it was
    # saved) trains no step here, so has no loss of its own to return.
    final = ctx.mean(loss.detach()) if loss is not None else None
    return {"final_loss": final, "steps": ctx.global_step}
