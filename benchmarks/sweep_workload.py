"""The trial that benchmarks/sweep_savings.py sweeps: a trainplane train
function of the kind a user tunes, a small feed-forward classifier on a noisy
synthetic task, judged by its loss on held-out data.

The task: inputs drawn from a standard normal; a fixed random "teacher" (two
tanh layers) gives every input a distribution over the classes, and each label
is drawn from it. The drawn labels are noisy on purpose: no model can beat the
teacher's own entropy (``floor``), so the held-out loss levels off well above
zero, as a real validation loss does, and a model that memorises the training
set's noise gets worse on it. The data depend on ``data_seed`` only, never on
the trial's parameters.

The training: AdamW, a linear warmup then a cosine decay over the whole run
(``steps``: the schedule is set by the planned horizon, so a trial judged
early runs at its peak rate, and the decay to come is the same for every
trial). ``loss`` is reported
at every step and ``val_loss`` (the held-out cross-entropy) every
``eval_every`` steps and at the last.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

import trainplane

DEFAULTS: dict[str, Any] = {
    "steps": 200,
    "eval_every": 10,
    "warmup": 5,
    "decay": "cosine",  # after the warmup: "cosine" to 0 at ``steps``, or "constant"
    "batch": 64,
    "lr": 1e-3,
    "weight_decay": 0.01,
    "hidden": 128,
    "layers": 2,
    "features": 32,
    "classes": 10,
    "samples": 8192,
    "val_samples": 1024,
    "temperature": 0.3,  # of the teacher's logits: lower, less label noise
    "data_seed": 0,
    "seed": 0,
}


class Teacher(nn.Module):
    """The labelling function: fixed random weights, never trained."""

    def __init__(self, features: int, classes: int, generator: torch.Generator) -> None:
        super().__init__()
        hidden = 4 * features
        self.first = torch.randn(features, hidden, generator=generator) / math.sqrt(features)
        self.second = torch.randn(hidden, classes, generator=generator) * 2 / math.sqrt(hidden)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(inputs @ self.first) @ self.second


def make_data(args: dict[str, Any]) -> tuple[TensorDataset, TensorDataset, float]:
    """The training set, the held-out set, and the lowest loss any model can
    reach on data from this teacher (its mean entropy on the held-out inputs)."""
    generator = torch.Generator().manual_seed(int(args["data_seed"]))
    teacher = Teacher(args["features"], args["classes"], generator)

    def draw(count: int) -> tuple[TensorDataset, float]:
        inputs = torch.randn(count, args["features"], generator=generator)
        probabilities = torch.softmax(teacher(inputs) / args["temperature"], dim=1)
        labels = torch.multinomial(probabilities, 1, generator=generator).squeeze(1)
        entropy = -(probabilities * probabilities.clamp_min(1e-12).log()).sum(1).mean()
        return TensorDataset(inputs, labels), float(entropy)

    train, _ = draw(args["samples"])
    held_out, floor = draw(args["val_samples"])
    return train, held_out, floor


def classifier(features: int, hidden: int, classes: int, layers: int) -> nn.Sequential:
    """A plain feed-forward network: ``layers`` hidden layers of GELU units."""
    widths = [features, *([hidden] * layers)]
    parts: list[nn.Module] = []
    for width_in, width_out in itertools.pairwise(widths):
        parts += [nn.Linear(width_in, width_out), nn.GELU()]
    return nn.Sequential(*parts, nn.Linear(widths[-1], classes))


def schedule(step: int, warmup: int, steps: int, decay: str) -> float:
    """The learning rate's factor after ``step`` optimizer steps: linear up
    to 1 over ``warmup`` steps, then constant or a cosine down to 0 at ``steps``."""
    if step < warmup:
        return (step + 1) / warmup
    if decay == "constant":
        return 1.0
    done = (step - warmup) / max(1, steps - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, done)))


def held_out_loss(model: nn.Module, held_out: TensorDataset, device: torch.device) -> float:
    inputs, labels = held_out.tensors
    model.eval()
    with torch.no_grad():
        loss = nn.functional.cross_entropy(model(inputs.to(device)).float(), labels.to(device))
    model.train()
    return float(loss)


def train_loop(ctx: trainplane.TrainContext) -> dict[str, float | None]:
    args = {**DEFAULTS, **ctx.args}
    steps, eval_every = int(args["steps"]), int(args["eval_every"])
    train, held_out, floor = make_data(args)
    torch.manual_seed(int(args["seed"]))  # the same initial weights for every trial
    batch = int(args["batch"]) // (ctx.world_size * ctx.grad_accum)
    loader = ctx.data_loader(train, batch_size=batch, seed=int(args["seed"]))
    model = classifier(args["features"], int(args["hidden"]), args["classes"], args["layers"])
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=float(args["lr"]), weight_decay=float(args["weight_decay"])
    )
    model, optimizer = ctx.prepare(
        model,
        optimizer,
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(
            opt, lambda step: schedule(step, int(args["warmup"]), steps, str(args["decay"]))
        ),
    )
    ctx.total_steps = steps
    ctx.restore()
    val_loss: float | None = None
    for inputs, labels in loader.forever():
        if ctx.global_step >= steps:
            break
        loss = nn.functional.cross_entropy(
            model(inputs.to(ctx.device)).float(), labels.to(ctx.device)
        )
        ctx.backward(loss)
        if not ctx.step():
            continue
        metrics = {"loss": ctx.mean(loss.detach())}
        if ctx.global_step % eval_every == 0 or ctx.global_step == steps:
            val_loss = ctx.mean(held_out_loss(model, held_out, ctx.device))
            metrics["val_loss"] = val_loss
        ctx.report(metrics)
    return {"val_loss": val_loss, "floor": floor, "steps": ctx.global_step}
