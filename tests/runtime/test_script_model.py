"""A script job's model: what rank 0 left in TRAINPLANE_MODEL_DIR, exported by
``python -m trainplane.runtime.script_model`` (run here in this process, as
its ``main``) for the control plane to register, and loaded back with MLflow.

Tiny models built here; the exports go to a local folder, one to S3 (moto)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch

from trainplane.runtime import env as tp_env
from trainplane.runtime.model_folders import NOTHING_LEFT
from trainplane.runtime.script_model import FINAL_REPORT, main
from trainplane.storage import exported_models as layout
from trainplane.storage.backends import open_storage
from trainplane.testing.tiny_models import build_tiny_llama

pytestmark = pytest.mark.ray_free

SPEC = {
    "kind": "train",
    "name": "script",
    "entrypoint": {"command": ["python", "train.py"]},
    "resources": {"gpus": 2},
    "strategy": {"type": "fsdp"},
    "register_model": {"name": "m"},
}


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), hidden_size=32, layers=1)


@pytest.fixture
def rank0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Rank 0's environment after its script exited 0: its model folder
    (returned, empty), the job's model URI (a local folder), its last report."""
    model_dir, sync_dir = tmp_path / "scratch" / "model", tmp_path / "scratch" / ".sync"
    model_dir.mkdir(parents=True)
    sync_dir.mkdir()
    (sync_dir / FINAL_REPORT).write_text(json.dumps({"step": 30, "metrics": {"loss": 0.25}}))
    for name, value in {
        tp_env.MODEL_DIR: str(model_dir),
        tp_env.MODEL_URI: str(tmp_path / "storage" / "model"),
        tp_env.SYNC_DIR: str(sync_dir),
        tp_env.SPEC: json.dumps(SPEC),
        tp_env.JOB_ID: "job-1",
        tp_env.ATTEMPT_ID: "attempt-1",
        "WORLD_SIZE": "2",
    }.items():
        monkeypatch.setenv(name, value)
    return model_dir


def exported(capsys: pytest.CaptureFixture[str]) -> tuple[layout.ModelManifest, Path | None]:
    """Run the export; the manifest and, for a local storage, the MLflow model."""
    assert main() == 0, capsys.readouterr().out
    root = os.environ[tp_env.MODEL_URI]
    manifest, problem = layout.read_manifest(open_storage(root))
    assert manifest is not None, problem
    assert (manifest.step, manifest.metrics) == (30, {"loss": 0.25})
    assert (manifest.strategy, manifest.world_size) == ("fsdp", 2)
    assert (manifest.job_id, manifest.attempt_id) == ("job-1", "attempt-1")
    local = None if root.startswith("s3://") else Path(root) / layout.MLFLOW_FOLDER
    return manifest, local


def flavors(mlflow_model: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load((mlflow_model / "MLmodel").read_text())["flavors"]


def failure(capsys: pytest.CaptureFixture[str]) -> str:
    """Run the export expecting a failure; its one line."""
    capsys.readouterr()
    assert main() == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(tp_env.TRAINING_FAILED), lines
    assert not Path(os.environ[tp_env.MODEL_URI], layout.MANIFEST).exists()
    return lines[0].removeprefix(tp_env.TRAINING_FAILED)


def test_a_model_saved_alone_is_a_python_model_from_code_and_registers(
    rank0: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # The acceptance check's script: a GPT-2 saved without a tokenizer, here
    # by Trainer.save_model, which adds its pickled arguments.
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=32)
    model = GPT2LMHeadModel(config).eval()
    model.save_pretrained(rank0)
    (rank0 / "training_args.bin").write_bytes(b"a pickle")

    manifest, mlflow_model = exported(capsys)
    assert (manifest.flavor, manifest.serialization) == ("python_function", "safetensors")
    assert not any(entry.path.endswith(".bin") for entry in manifest.files)
    assert mlflow_model is not None
    pyfunc = flavors(mlflow_model)["python_function"]
    assert "model_code_path" in pyfunc and "python_model" not in pyfunc  # nothing pickled

    import mlflow.pyfunc

    loaded = mlflow.pyfunc.load_model(str(mlflow_model))
    prompts = [[1, 2, 3], [7, 8]]
    with torch.no_grad():
        expected = [int(model(torch.tensor([p])).logits[0, -1].argmax()) for p in prompts]
    assert loaded.predict(prompts) == expected

    # The control plane registers it as it does a train function's model.
    from trainplane.tracking.client import MlflowTracking, TrackingConfig
    from trainplane.tracking.registry import Registration, register

    mlflow_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", mlflow_uri)
    tracking = MlflowTracking(
        TrackingConfig(mlflow_uri, mlflow_uri, str(tmp_path / "mlflow-artifacts"), None)
    )
    run_id = tracking.create_run(
        tracking.experiment(f"scripts-{uuid.uuid4().hex[:8]}"), name="job", start_time_ms=0, tags={}
    )
    name = f"script-{uuid.uuid4().hex[:8]}"
    registration = Registration(
        name, None, run_id, os.environ[tp_env.MODEL_URI], "job-1", "alpha", None
    )
    version = register(tracking, registration, still_ours=lambda: True)
    registered = mlflow.pyfunc.load_model(f"models:/{name}/{version}")
    assert registered.predict(prompts) == expected


def test_a_save_pretrained_folder_with_a_tokenizer_is_a_transformers_model_on_s3(
    rank0: Path,
    tiny_llama: Path,
    capsys: pytest.CaptureFixture[str],
    s3_bucket: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
):
    from transformers import AutoTokenizer, LlamaForCausalLM

    LlamaForCausalLM.from_pretrained(tiny_llama).save_pretrained(rank0)
    AutoTokenizer.from_pretrained(tiny_llama).save_pretrained(rank0)
    monkeypatch.setenv(tp_env.MODEL_URI, f"s3://{s3_bucket}/alpha/job-1/model")

    manifest, _ = exported(capsys)
    assert (manifest.flavor, manifest.serialization) == ("transformers", "safetensors")
    local = tmp_path / "downloaded"
    open_storage(os.environ[tp_env.MODEL_URI]).get_tree(layout.MLFLOW_FOLDER, local)
    assert flavors(local)["transformers"]["task"] == "text-generation"

    import mlflow.transformers

    pipeline = mlflow.transformers.load_model(str(local))
    answer = pipeline("what is 3 plus 3?", max_new_tokens=2, do_sample=False)
    assert answer[0]["generated_text"].startswith("what is 3 plus 3?")


def test_a_peft_adapter_is_published_in_mlflows_peft_layout(
    rank0: Path, tiny_llama: Path, capsys: pytest.CaptureFixture[str]
):
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoTokenizer, LlamaForCausalLM

    torch.manual_seed(0)
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    adapted = get_peft_model(LlamaForCausalLM.from_pretrained(tiny_llama), lora).eval()
    adapted.save_pretrained(rank0)  # names the base's local folder
    AutoTokenizer.from_pretrained(tiny_llama).save_pretrained(rank0)

    manifest, mlflow_model = exported(capsys)
    assert (manifest.flavor, manifest.serialization) == ("transformers", "peft-lora")
    assert mlflow_model is not None
    assert flavors(mlflow_model)["transformers"]["peft_adaptor"] == "peft"
    assert (mlflow_model / "peft" / "adapter_model.safetensors").is_file()

    import mlflow.transformers

    parts = mlflow.transformers.load_model(str(mlflow_model), return_type="components")
    assert isinstance(parts["model"], PeftModel)
    tokens = parts["tokenizer"]("what is 2 plus 2?", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(parts["model"].eval()(tokens).logits, adapted(tokens).logits)


def test_an_mlflow_model_folder_is_published_as_it_is(
    rank0: Path, tiny_llama: Path, capsys: pytest.CaptureFixture[str]
):
    import mlflow.transformers
    from transformers import AutoTokenizer, LlamaForCausalLM

    components = {
        "model": LlamaForCausalLM.from_pretrained(tiny_llama),
        "tokenizer": AutoTokenizer.from_pretrained(tiny_llama),
    }
    rank0.rmdir()  # MLflow saves into a folder of its own
    mlflow.transformers.save_model(
        components, str(rank0), task="text-generation", pip_requirements=["transformers"]
    )
    written = sorted(p.relative_to(rank0).as_posix() for p in rank0.rglob("*") if p.is_file())

    manifest, mlflow_model = exported(capsys)
    assert manifest.flavor == "transformers"  # not python_function, listed too
    assert sorted(entry.path for entry in manifest.files) == [f"mlflow/{p}" for p in written]
    assert mlflow_model is not None
    loaded = mlflow.transformers.load_model(str(mlflow_model))
    assert loaded("what is", max_new_tokens=1, do_sample=False)[0]["generated_text"]


def test_what_cannot_be_registered_fails_the_rank_with_one_line(
    rank0: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
):
    assert failure(capsys) == NOTHING_LEFT  # empty
    # As rank 0's supervisor runs it.
    ran = subprocess.run(
        [sys.executable, "-m", "trainplane.runtime.script_model"], capture_output=True, text=True
    )
    assert (ran.returncode, ran.stdout) == (1, f"{tp_env.TRAINING_FAILED}{NOTHING_LEFT}\n")
    rank0.rmdir()
    assert failure(capsys) == NOTHING_LEFT  # missing

    rank0.mkdir()
    (rank0 / "notes.txt").write_text("a model, surely")
    (rank0 / "weights.pt").write_bytes(b"a pickle")
    assert "holds no MLflow model (MLmodel), PEFT adapter" in failure(capsys)
    assert "notes.txt, weights.pt" in failure(capsys)

    (rank0 / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    (rank0 / "pytorch_model.bin").write_bytes(b"a pickle")
    assert "are pickles (pytorch_model.bin)" in failure(capsys)

    secret = tmp_path / "secret"
    secret.write_text("not the job's")
    (rank0 / "model.safetensors").symlink_to(secret)
    assert "holds a symlink (model.safetensors)" in failure(capsys)

    (rank0 / "model.safetensors").unlink()
    (rank0 / "MLmodel").write_text("flavors: [unclosed\n")
    assert "MLmodel does not parse" in failure(capsys)

    (rank0 / "MLmodel").unlink()
    (rank0 / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/x"}))
    (rank0 / "adapter_model.safetensors").write_bytes(b"")
    assert "must be a local save_pretrained folder" in failure(capsys)
