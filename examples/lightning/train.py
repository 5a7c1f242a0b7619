"""A tiny recommender (matrix factorization) trained by a Lightning ``Trainer``
with DDP; trainplane's lines are marked ``# trainplane``.

The ratings are generated from a fixed seed (hidden user and item factors),
so the run needs no download. Run it either way:

    torchrun --nproc-per-node 2 train.py
    trainplane submit examples/lightning/job.yaml --wait
"""

from __future__ import annotations

import argparse
import os
import time

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainplane.integrations.lightning import TrainplaneCallback, resume_ckpt_path  # trainplane


def ratings(users: int, items: int, samples: int, seed: int = 0) -> TensorDataset:
    """(user, item, rating) triples from hidden rank-4 factors plus noise."""
    generator = torch.Generator().manual_seed(seed)
    user_factors = torch.randn(users, 4, generator=generator)
    item_factors = torch.randn(items, 4, generator=generator)
    user = torch.randint(users, (samples,), generator=generator)
    item = torch.randint(items, (samples,), generator=generator)
    rating = (user_factors[user] * item_factors[item]).sum(1)
    return TensorDataset(user, item, rating + 0.1 * torch.randn(samples, generator=generator))


class Recommender(pl.LightningModule):
    def __init__(self, users: int, items: int, dim: int, lr: float, step_sleep: float) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.users = nn.Embedding(users, dim)
        self.items = nn.Embedding(items, dim)

    def forward(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        return (self.users(user) * self.items(item)).sum(1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        user, item, rating = batch
        loss = nn.functional.mse_loss(self(user, item), rating)
        self.log("loss", loss)
        if self.hparams.step_sleep:
            time.sleep(self.hparams.step_sleep)  # to watch it (or stop it) as it trains
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_steps", type=int, default=60)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--step_sleep", type=float, default=0.0)
    args = parser.parse_args()

    pl.seed_everything(0)
    data = DataLoader(ratings(users=200, items=100, samples=8192), batch_size=64, shuffle=True)
    model = Recommender(users=200, items=100, dim=8, lr=args.lr, step_sleep=args.step_sleep)
    # torchrun's environment says how many processes there are (1 when run alone).
    devices = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    nodes = int(os.environ.get("WORLD_SIZE", "1")) // devices
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        num_nodes=nodes,
        strategy="ddp" if devices * nodes > 1 else "auto",
        max_steps=args.max_steps,
        log_every_n_steps=5,
        logger=False,
        enable_checkpointing=False,  # trainplane's callback checkpoints as the job says
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[TrainplaneCallback()],  # trainplane
    )
    trainer.fit(model, data, ckpt_path=resume_ckpt_path())  # trainplane
    if trainer.is_global_zero:
        loss = float(trainer.callback_metrics["loss"])
        print(f"done at step {trainer.global_step}, loss {loss:.4f}", flush=True)


if __name__ == "__main__":
    main()
