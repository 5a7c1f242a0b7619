"""trainplane.integrations.lightning.TrainplaneCallback on a real Lightning
``Trainer`` in this process, as rank 0 of a world of one: the environment is
what a rank of a script job gets (a local checkpoint storage, a sync folder),
and the checkpoints go through trainplane.script's real publication."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainplane import script
from trainplane.integrations.lightning import CHECKPOINT_FILE, TrainplaneCallback, resume_ckpt_path
from trainplane.runtime.stop_watch import STOP_FILE
from trainplane.storage import checkpoints as layout
from trainplane.storage.backends import open_storage

SPEC = {
    "kind": "train",
    "name": "lightning",
    "entrypoint": {"script": "train.py"},
    "resources": {"gpus": 1},
    "checkpoint": {"every_steps": 2, "keep_last": 2},
}


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        loss = nn.functional.mse_loss(self.layer(inputs), targets)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class StopAt(pl.Callback):
    """Asks the attempt to stop once ``step`` is done, as the control plane's
    answer does: the node's stop file, which trainplane.script reads."""

    def __init__(self, sync_dir: Path, step: int) -> None:
        self.stop_file = sync_dir / STOP_FILE
        self.step = step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            self.stop_file.write_text("preempted by a test")


@pytest.fixture
def rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The environment of rank 0 of one; yields the checkpoint storage."""
    storage = tmp_path / "storage"
    storage.mkdir()
    for name in ("TRAINPLANE_URL", "TRAINPLANE_RESUME_FROM", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    environment = {
        "TRAINPLANE_SPEC": json.dumps(SPEC),
        "TRAINPLANE_CHECKPOINT_URI": str(storage),
        "TRAINPLANE_CHECKPOINT_DIR": str(tmp_path / "scratch" / "checkpoints"),
        "TRAINPLANE_SYNC_DIR": str(tmp_path / "scratch" / ".sync"),
        "TRAINPLANE_METRICS_FILE": str(tmp_path / "metrics.jsonl"),
        "TRAINPLANE_NODES": "1",
        **{"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"},
    }
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "scratch" / ".sync").mkdir(parents=True)
    monkeypatch.setattr(script, "_current", None)  # a fresh process's session
    yield storage


def fit(max_steps: int, *callbacks: pl.Callback) -> pl.Trainer:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(64, 4, generator=generator)
    data = DataLoader(TensorDataset(inputs, inputs.sum(1, keepdim=True)), batch_size=8)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        log_every_n_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[*callbacks, TrainplaneCallback()],
    )
    trainer.fit(Regression(), data, ckpt_path=resume_ckpt_path())
    return trainer


def reported_steps(metrics_file: str | Path) -> list[int]:
    lines = Path(metrics_file).read_text().splitlines()
    return [json.loads(line)["step"] for line in lines]


def complete(storage: Path) -> dict[int, layout.Manifest]:
    folders = layout.complete_checkpoints(open_storage(str(storage)))
    return {folder.step: folder.manifest for folder in folders if folder.manifest}


def test_reports_and_checkpoints_by_the_policy_then_resumes_from_the_latest(
    rank: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = fit(5)
    assert trainer.global_step == 5
    assert reported_steps(tmp_path / "metrics.jsonl") == [1, 2, 3, 4, 5]
    saved = complete(rank)
    assert sorted(saved) == [2, 4]  # every 2 steps; keep_last 2 (step 5 is no policy step)
    manifest = saved[4]
    assert [entry.path for entry in manifest.files] == [CHECKPOINT_FILE]
    assert manifest.reason is None and "loss" in manifest.metrics
    state = torch.load(rank / "step-4" / CHECKPOINT_FILE, weights_only=False)
    assert state["global_step"] == 4

    # A restart: a new process resumes from the latest published checkpoint.
    (tmp_path / "metrics.jsonl").unlink()
    monkeypatch.setenv("TRAINPLANE_RESUME_FROM", str(rank / "step-4"))
    monkeypatch.setattr(script, "_current", None)
    assert resume_ckpt_path() == str(rank / "step-4" / CHECKPOINT_FILE)
    trainer = fit(8)
    assert trainer.global_step == 8
    assert reported_steps(tmp_path / "metrics.jsonl") == [5, 6, 7, 8]
    assert "trainplane: resumed from checkpoint step 4" in capsys.readouterr().out
    assert sorted(complete(rank)) == [6, 8]


def test_a_stop_request_saves_and_ends_fit(
    rank: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = fit(50, StopAt(tmp_path / "scratch" / ".sync", 3))
    assert trainer.global_step == 3  # fit returned: the script goes on and exits 0
    saved = complete(rank)
    assert sorted(saved) == [2, 3]
    assert saved[3].reason == "preempted" and saved[2].reason is None
    assert "stopping after the checkpoint at step 3" in capsys.readouterr().out


def test_without_trainplane_nothing_is_resumed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINPLANE_RESUME_FROM", raising=False)
    assert resume_ckpt_path() is None
