"""A small MLP classifier on a synthetic dataset, written once for every strategy.

The dataset is made from a fixed seed (a random "teacher" network labels random
inputs), so runs are reproducible and need no download.
"""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.utils.data import TensorDataset

import trainplane


def make_dataset(samples: int, features: int, classes: int, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, features, generator=generator)
    teacher = torch.randn(features, classes, generator=generator)
    labels = (inputs @ teacher + 0.1 * torch.randn(samples, classes, generator=generator)).argmax(1)
    return TensorDataset(inputs, labels)


class MLP(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int, layers: int = 2) -> None:
        super().__init__()
        self.inp = nn.Linear(features, hidden)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, hidden), nn.GELU())
            for _ in range(layers)
        )
        self.out = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = x + block(x)
        return self.out(x)


def train_loop(ctx: trainplane.TrainContext) -> dict[str, float]:
    args = {
        "steps": 60,
        "global_batch": 64,
        "lr": 3e-3,
        "features": 32,
        "hidden": 128,
        "classes": 8,
        "layers": 2,
        "samples": 4096,
        "seed": 0,
        "step_sleep": 0.0,
        **ctx.args,
    }
    torch.manual_seed(args["seed"])  # the same initial weights on every rank
    dataset = make_dataset(args["samples"], args["features"], args["classes"], args["seed"])
    batch = args["global_batch"] // (ctx.world_size * ctx.grad_accum)
    loader = ctx.data_loader(dataset, batch_size=batch, seed=args["seed"])
    model = MLP(args["features"], args["hidden"], args["classes"], args["layers"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=args["lr"])
    model, optimizer = ctx.prepare(
        model,
        optimizer,
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, args["steps"]),
    )
    ctx.total_steps = args["steps"]
    ctx.restore()
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    loss = None
    for inputs, labels in loader.forever():
        if ctx.global_step >= args["steps"]:
            break
        inputs, labels = inputs.to(ctx.device), labels.to(ctx.device)
        loss = loss_fn(model(inputs).float(), labels)
        ctx.backward(loss)
        if ctx.step():
            # Every rank reports. A tensor is averaged over the ranks (comparable
            # across world sizes), in batches: no collective of its own per step.
            ctx.report({"loss": loss.detach()})
            if args["step_sleep"]:
                time.sleep(args["step_sleep"])
    # A run resumed from its final checkpoint (a worker lost after it was
    # saved) trains no step here, so has no loss of its own to return.
    final = ctx.mean(loss.detach()) if loss is not None else None
    return {"final_loss": final, "steps": ctx.global_step}
