"""trainplane.integrations.transformers on a real Hugging Face ``Trainer`` in
this process, as rank 0 of a world of one: the environment is what a rank of
a script job gets (a local checkpoint storage, a sync folder), and the
checkpoints go through trainplane.script's real publication."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from accelerate.state import AcceleratorState
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from trainplane import script
from trainplane.integrations.transformers import (
    TrainplaneCallback,
    model_dir,
    resume_from,
    trainer_arguments,
)
from trainplane.net import free_port
from trainplane.runtime.stop_watch import STOP_FILE
from trainplane.storage import checkpoints as layout
from trainplane.storage.backends import open_storage

SPEC: dict[str, Any] = {
    "kind": "train",
    "name": "hf-trainer",
    "entrypoint": {"script": "train.py"},
    "resources": {"gpus": 1},
    "checkpoint": {"every_steps": 2, "keep_last": 2},
}


class StopAt(TrainerCallback):
    """Asks the attempt to stop once ``step`` is done, as the control plane's
    answer does: the node's stop file, which trainplane.script reads."""

    def __init__(self, sync_dir: Path, step: int) -> None:
        self.stop_file = sync_dir / STOP_FILE
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            self.stop_file.write_text("preempted by a test")


def set_env(monkeypatch: pytest.MonkeyPatch, environment: dict[str, str | None]) -> None:
    """``environment`` in this process's (None: unset), and a fresh script session."""
    for name, value in environment.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setattr(script, "_current", None)


def attempt_folders(scratch: Path) -> dict[str, str | None]:
    """A new attempt's folders on its node."""
    (scratch / ".sync").mkdir(parents=True)
    return {
        "TRAINPLANE_CHECKPOINT_DIR": str(scratch / "checkpoints"),
        "TRAINPLANE_MODEL_DIR": str(scratch / "model"),
        "TRAINPLANE_SYNC_DIR": str(scratch / ".sync"),
    }


@pytest.fixture
def rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The environment of rank 0 of one; yields the checkpoint storage."""
    storage = tmp_path / "storage"
    storage.mkdir()
    torchrun = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    # With torchrun's variables, the Trainer (Accelerate) starts a process group of one.
    rendezvous = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    job = {
        "TRAINPLANE_SPEC": json.dumps(SPEC),
        "TRAINPLANE_CHECKPOINT_URI": str(storage),
        "TRAINPLANE_METRICS_FILE": str(tmp_path / "metrics.jsonl"),
        "TRAINPLANE_NODES": "1",
        "TRAINPLANE_DEVICE": "cpu",
        "TRAINPLANE_URL": None,
        "TRAINPLANE_RESUME_FROM": None,
        "OMP_NUM_THREADS": "1",  # else Accelerate sets it for the rest of the session
    }
    set_env(monkeypatch, {**job, **torchrun, **rendezvous, **attempt_folders(tmp_path / "a1")})
    try:
        yield storage
    finally:
        # This process's Accelerate state and process group, as a new process has none.
        AcceleratorState._reset_state(reset_partial_state=True)
        if dist.is_initialized():
            dist.destroy_process_group()


class Sequences(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = (torch.arange(8) * (index % 5 + 1)) % 32
        return {"input_ids": ids, "labels": ids}


def train(max_steps: int, *callbacks: TrainerCallback) -> Trainer:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=8)
    model = GPT2LMHeadModel(config)
    arguments = trainer_arguments(
        max_steps=max_steps,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        logging_steps=1,
        report_to=[],
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=TrainingArguments(**arguments),
        train_dataset=Sequences(),
        callbacks=[*callbacks, TrainplaneCallback()],
    )
    trainer.train(resume_from_checkpoint=resume_from())
    return trainer


def reported(metrics_file: Path) -> list[tuple[int, dict[str, float]]]:
    lines = metrics_file.read_text().splitlines()
    return [(point["step"], point["metrics"]) for point in map(json.loads, lines)]


def losses_by_step(metrics_file: Path) -> dict[int, float]:
    return {step: values["loss"] for step, values in reported(metrics_file) if "loss" in values}


def complete(storage: Path) -> dict[int, layout.Manifest]:
    folders = layout.complete_checkpoints(open_storage(str(storage)))
    return {folder.step: folder.manifest for folder in folders if folder.manifest}


def test_the_spec_decides_checkpoints_and_a_cpu_cluster(rank: Path, tmp_path: Path) -> None:
    arguments = trainer_arguments(max_steps=3)
    assert arguments["output_dir"] == str(tmp_path / "a1" / "checkpoints")
    assert (arguments["save_strategy"], arguments["save_steps"]) == ("steps", 2)
    assert arguments["save_total_limit"] == 2
    assert (arguments["use_cpu"], arguments["bf16"], arguments["fp16"]) == (True, False, False)
    assert "fsdp" not in arguments and "deepspeed" not in arguments  # ddp: the Trainer's own
    assert trainer_arguments(save_steps=7)["save_steps"] == 7  # yours win


def test_fsdp_and_deepspeed_come_from_strategy_type(
    rank: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINPLANE_SPEC", json.dumps({**SPEC, "strategy": {"type": "fsdp"}}))
    arguments = trainer_arguments()
    assert arguments["fsdp"] is True
    assert arguments["fsdp_config"] == {"version": 2, "reshard_after_forward": True}

    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    zero = {"type": "deepspeed", "deepspeed": {"stage": 2, "config": {"zero_allow_untested": 1}}}
    monkeypatch.setenv("TRAINPLANE_SPEC", json.dumps({**SPEC, "strategy": zero}))
    config = trainer_arguments()["deepspeed"]
    assert config["zero_optimization"] == {"stage": 2}
    # What the Trainer knows is left for it to fill; the user's config is merged over.
    assert config["train_micro_batch_size_per_gpu"] == "auto"
    assert config["bf16"] == {"enabled": "auto"}
    assert config["zero_allow_untested"] == 1
    assert "fsdp" not in trainer_arguments()
    assert os.environ["DS_ACCELERATOR"] == "cpu"


def test_reports_and_checkpoints_then_a_restart_resumes_from_the_latest(
    rank: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = tmp_path / "metrics.jsonl"
    trainer = train(5)
    assert trainer.state.global_step == 5
    assert sorted(losses_by_step(metrics)) == [1, 2, 3, 4, 5]
    assert any("train_runtime" in values for _, values in reported(metrics))  # the summary too
    saved = complete(rank)
    assert sorted(saved) == [4, 5]  # every 2 steps and the last; keep_last 2
    files = {entry.path for entry in saved[4].files}
    assert {"trainer_state.json", "model.safetensors", "optimizer.pt"} <= files
    assert saved[4].reason is None and saved[4].metrics["loss"] == losses_by_step(metrics)[4]
    state = json.loads((rank / "step-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4

    # A new attempt resumes from step 4 and reports only the steps after it.
    expected = losses_by_step(metrics)
    metrics.unlink()
    resume = {"TRAINPLANE_RESUME_FROM": str(rank / "step-4")}
    set_env(monkeypatch, {**attempt_folders(tmp_path / "a2"), **resume})
    trainer = train(5)
    assert trainer.state.global_step == 5
    assert "trainplane: resumed from checkpoint step 4" in capsys.readouterr().out
    resumed = losses_by_step(metrics)
    assert sorted(resumed) == [5]
    assert resumed[5] == pytest.approx(expected[5], rel=1e-5)  # it continued, weights and all
    trainer.save_model(model_dir())
    assert (tmp_path / "a2" / "model" / "config.json").exists()


def test_a_stop_request_saves_and_ends_train(
    rank: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = train(50, StopAt(tmp_path / "a1" / ".sync", 3))
    assert trainer.state.global_step == 3  # train() returned: the script goes on and exits 0
    saved = complete(rank)
    assert sorted(saved) == [2, 3]
    assert saved[3].reason == "preempted" and saved[2].reason is None
    assert "stopping after the checkpoint at step 3" in capsys.readouterr().out


def fsdp_trainer(monkeypatch: pytest.MonkeyPatch, **arguments: Any) -> Trainer:
    """A Trainer of a job whose spec says fsdp, made as a script makes it."""
    monkeypatch.setenv("TRAINPLANE_SPEC", json.dumps({**SPEC, "strategy": {"type": "fsdp"}}))
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=8))
    args = TrainingArguments(
        **arguments
    )  # before the callback, as in Trainer(..., callbacks=[...])
    return Trainer(model=model, args=args, callbacks=[TrainplaneCallback()])


def test_the_trainer_is_told_where_it_does_not_follow_the_spec(
    rank: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Arguments of the script's own, without trainer_arguments(): no FSDP.
    trainer = fsdp_trainer(monkeypatch, use_cpu=True)
    assert not trainer.is_fsdp_enabled
    out = capsys.readouterr().out
    assert "strategy.type is fsdp but the Trainer is not set up for FSDP" in out
    assert "pass **trainer_arguments()" in out


def test_trls_dpo_trainer_reports_checkpoints_and_stops_on_request(
    rank: Path, tmp_path: Path
) -> None:
    """The callback under TRL's DPOTrainer (preference pairs), as under SFTTrainer
    in examples/trl-sft: its losses and reward figures reach the reports, its
    checkpoints are published, and a stop request ends train() with a save."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    from trainplane.testing.tiny_models import build_tiny_llama

    folder = build_tiny_llama(tmp_path / "tiny-llama", hidden_size=32, layers=1)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    pairs = Dataset.from_list(
        [
            {"prompt": f"what is {i} plus {i}?", "chosen": f" {2 * i}", "rejected": f" {2 * i + 1}"}
            for i in range(32)
        ]
    )
    torch.manual_seed(0)
    arguments = trainer_arguments(
        max_steps=50,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        disable_tqdm=True,
    )
    trainer = DPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(folder),
        args=DPOConfig(**arguments),
        train_dataset=pairs,
        processing_class=tokenizer,
        callbacks=[StopAt(tmp_path / "a1" / ".sync", 3), TrainplaneCallback()],
    )
    trainer.train(resume_from_checkpoint=resume_from())
    assert trainer.state.global_step == 3
    points = dict(reported(tmp_path / "metrics.jsonl"))
    assert {1, 2, 3} <= set(points)
    assert "loss" in points[1] and any(name.startswith("rewards/") for name in points[1])
    saved = complete(rank)
    assert sorted(saved) == [2, 3]
    assert saved[3].reason == "preempted"
    assert "trainer_state.json" in {entry.path for entry in saved[3].files}
