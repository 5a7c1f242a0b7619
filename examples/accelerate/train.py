"""An Accelerate training loop (a small MLP classifier on generated data) with
trainplane's checkpoints, resume, metrics and stop requests; trainplane's
lines are marked ``# trainplane``.

The data are made from a fixed seed (a random "teacher" network labels random
inputs), so the run needs no download. Run it either way:

    torchrun --nproc-per-node 2 train.py
    trainplane submit examples/accelerate/job.yaml --wait
"""

from __future__ import annotations

import argparse
import time

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainplane import script  # trainplane


def dataset(samples: int, features: int, classes: int, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, features, generator=generator)
    labels = (inputs @ torch.randn(features, classes, generator=generator)).argmax(1)
    return TensorDataset(inputs, labels)


class Progress:
    """The optimizer steps done, saved and loaded with Accelerate's state."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = state["step"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_steps", type=int, default=60)
    parser.add_argument("--save_every", type=int, default=20)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--step_sleep", type=float, default=0.0)
    args = parser.parse_args()

    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loader = DataLoader(dataset(4096, 32, 8), batch_size=32, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    if script.resume_from():  # trainplane
        accelerator.load_state(script.resume_from())  # trainplane
        accelerator.print(f"resumed from checkpoint step {progress.step}")

    while progress.step < args.max_steps:
        for inputs, labels in loader:
            loss = nn.functional.cross_entropy(model(inputs), labels)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            progress.step += 1
            loss = accelerator.reduce(loss.detach(), "mean")  # the mean over the ranks
            script.report({"loss": loss}, step=progress.step)  # trainplane
            stop = script.should_stop()  # trainplane (every rank: it is collective)
            if stop or progress.step % args.save_every == 0 or progress.step == args.max_steps:
                accelerator.save_state(script.checkpoint_dir())  # trainplane
                script.checkpoint(progress.step)  # trainplane (every rank)
            if stop or progress.step == args.max_steps:
                break
            if args.step_sleep:
                time.sleep(args.step_sleep)  # to watch it (or stop it) as it trains
        if stop:
            accelerator.print(f"stopping after the checkpoint at step {progress.step}")
            break
    accelerator.print(f"done at step {progress.step}, loss {loss.item():.4f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
