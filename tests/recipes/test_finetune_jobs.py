"""Fine-tune jobs end to end: ``kind: finetune`` specs submitted to a real
``trainplane server``, trained on a real local Ray cluster (2 CPU workers,
gloo) from a tiny random-init Llama built here, tracked in real MLflow, and
the registered versions loaded back with transformers and made to generate."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import FinetuneFiles
from tests.factories import EXAMPLES
from tests.runtime.test_training import kill_when_past
from tests.tracking.test_tracking_runs import TrackedService, start_tracked_server
from trainplane.backends.local_ray import LocalRayHead

STEPS = 60


class FinetuneService(TrackedService):
    def __init__(self, *args: Any, files: FinetuneFiles, slow_model: Path) -> None:
        super().__init__(*args)
        self.files = files
        self.slow_model = slow_model
        self.reference: dict[int, float] | None = None

    def submit_finetune(self, **fields: Any) -> str:
        body = self.files.spec(
            name=f"ft-{uuid.uuid4().hex[:6]}",
            resources={"gpus": 2},
            checkpoint={"every_steps": 10, "keep_last": 2},
            retries={"max_restarts": 1, "backoff_seconds": 0},
            **fields,
        )
        answer = self.http.post("/v1/jobs", json=body)
        assert answer.status_code == 201, answer.text
        return answer.json()["id"]

    def points(self, job_id: str) -> dict[int, dict[str, float]]:
        """Every reported metric per step (a step reported twice: the later)."""
        page = self.http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10_000}).json()
        merged: dict[int, dict[str, float]] = {}
        for point in page["points"]:
            merged.setdefault(point["step"], {}).update(point["metrics"])
        return merged

    def losses(self, job_id: str) -> dict[int, float]:
        """The training loss per step (the eval-only point of step 0 has none)."""
        return {s: m["loss"] for s, m in self.points(job_id).items() if "loss" in m}

    def lora_spec(self, model_name: str, **extra: Any) -> dict[str, Any]:
        """The LoRA run that the resume test repeats: slow enough to kill mid-way."""
        return {
            "base_model": str(self.slow_model),
            "method": {"type": "lora", "r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]},
            "hyperparameters": {
                "learning_rate": 0.003,
                "max_steps": STEPS,
                "micro_batch_size": 8,
                "max_seq_len": 64,
                "warmup_steps": 5,
                "eval_every_steps": 20,
            },
            "strategy": {"type": "ddp"},
            "register_model": {"name": model_name, "alias": "candidate"},
            **extra,
        }


@pytest.fixture(scope="module")
def service(
    ray_head: LocalRayHead,
    s3_endpoint: str,
    finetune_files: FinetuneFiles,
    server_files: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[FinetuneService]:
    from trainplane.testing.tiny_models import build_tiny_llama

    home = tmp_path_factory.mktemp("finetune-service")
    # The models and datasets are the server's own files (TRAINPLANE_SERVER_PATHS).
    slow_model = build_tiny_llama(server_files / "slow-model", hidden_size=256, layers=4)
    mlflow_uri = f"sqlite:///{home / 'mlflow.db'}"
    paths = f"{EXAMPLES}:{server_files}"
    with start_tracked_server(
        home, ray_head, s3_endpoint, mlflow_uri, TRAINPLANE_SERVER_PATHS=paths
    ) as server:
        yield FinetuneService(
            server.url, home, s3_endpoint, mlflow_uri, files=finetune_files, slow_model=slow_model
        )


@pytest.fixture
def mlflow_env(service: FinetuneService, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", service.mlflow_uri)


def assert_eval_loss_went_down(service: FinetuneService, job_id: str) -> dict[int, float]:
    evals = {s: m["eval_loss"] for s, m in service.points(job_id).items() if "eval_loss" in m}
    assert min(evals) == 0 and max(evals) == max(service.losses(job_id))
    assert evals[max(evals)] < evals[0] - 0.1, evals
    return evals


def generate(model: Any, tokenizer: Any) -> str:
    prompt = tokenizer("what is 7 plus 7?", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > prompt["input_ids"].shape[1]
    return tokenizer.decode(out[0][prompt["input_ids"].shape[1] :])


def test_a_lora_finetune_with_ddp_succeeds_and_its_adapter_loads_and_generates(
    service: FinetuneService, mlflow_env: None, tmp_path: Path
):
    import mlflow
    import mlflow.transformers
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = f"lora-{uuid.uuid4().hex[:6]}"
    job_id = service.submit_finetune(
        **service.lora_spec(
            name,
            method={
                "type": "lora",
                "r": 8,
                "alpha": 16,
                "target_modules": ["q_proj", "v_proj"],
                "merge": True,
            },
        )
    )
    detail = service.succeeded(job_id)
    assert detail["kind"] == "finetune"
    assert detail["progress"]["total_steps"] == STEPS
    service.reference = service.losses(job_id)
    assert sorted(service.reference) == list(range(1, STEPS + 1))
    evals = assert_eval_loss_went_down(service, job_id)
    assert sorted(evals) == [0, 20, 40, 60]
    logs = service.logs(job_id)
    assert "PeftModelForCausalLM (lora" in logs and "on 2 CPU worker(s)" in logs
    # A LoRA checkpoint is the adapter and its optimizer state, not the base model.
    checkpoints = service.http.get(f"/v1/jobs/{job_id}/checkpoints").json()["checkpoints"]
    base_bytes = (service.slow_model / "model.safetensors").stat().st_size
    assert checkpoints and all(c["size_bytes"] < base_bytes / 5 for c in checkpoints)

    job = service.tracked(job_id)
    assert job["registered_model"]["name"] == name and job["registered_model"]["version"] == "1"
    run = service.client().get_run(job["tracking"]["run_id"])
    assert run.data.params["method.type"] == "lora"
    assert run.data.params["base_model"] == str(service.slow_model)
    assert run.data.tags["trainplane.kind"] == "finetune"
    assert run.data.metrics["eval_loss"] == pytest.approx(evals[STEPS])

    # Through MLflow: the PEFT model, adapter on the saved base.
    parts = mlflow.transformers.load_model(f"models:/{name}@candidate", return_type="components")
    assert isinstance(parts["model"], PeftModel)
    generate(parts["model"], parts["tokenizer"])
    # With transformers and peft alone, from the downloaded files.
    files = Path(mlflow.artifacts.download_artifacts(f"models:/{name}/1", dst_path=str(tmp_path)))
    tokenizer = AutoTokenizer.from_pretrained(files / "components" / "tokenizer")
    base = AutoModelForCausalLM.from_pretrained(files / "model")
    adapted = PeftModel.from_pretrained(base, files / "peft").eval()
    text = generate(adapted, tokenizer)
    assert text == generate(parts["model"].eval(), parts["tokenizer"])
    # The merged model, logged to the same run, computes what the adapter does.
    version = service.client().get_model_version(name, "1")
    merged_uri = version.tags["trainplane.merged-model"]
    assert merged_uri == f"runs:/{run.info.run_id}/merged-model"
    merged = mlflow.transformers.load_model(merged_uri, return_type="components")["model"].eval()
    probe = tokenizer("what is 9 plus 9?", return_tensors="pt")
    with torch.no_grad():
        assert torch.allclose(merged(**probe).logits, adapted(**probe).logits, atol=1e-4)


def test_a_full_finetune_with_deepspeed_zero2_succeeds_and_loads_and_generates(
    service: FinetuneService, mlflow_env: None
):
    import mlflow.transformers
    from transformers import LlamaForCausalLM

    name = f"full-{uuid.uuid4().hex[:6]}"
    job_id = service.submit_finetune(
        method={"type": "full"},
        hyperparameters={
            "learning_rate": 0.002,
            "max_steps": 30,
            "micro_batch_size": 8,
            "max_seq_len": 32,
            "warmup_steps": 3,
            "grad_accum": 2,
        },
        strategy={"type": "deepspeed", "deepspeed": {"stage": 2}},
        register_model={"name": name},
    )
    service.succeeded(job_id)
    assert_eval_loss_went_down(service, job_id)
    job = service.tracked(job_id)
    assert job["registered_model"]["version"] == "1"
    parts = mlflow.transformers.load_model(f"models:/{name}/1", return_type="components")
    assert isinstance(parts["model"], LlamaForCausalLM)
    generate(parts["model"], parts["tokenizer"])
    # The registered weights are the trained ones, not the base model's.
    base = LlamaForCausalLM.from_pretrained(service.files.model)
    trained = dict(parts["model"].named_parameters())
    assert any(not torch.equal(p, trained[n]) for n, p in base.named_parameters() if n in trained)


def test_a_killed_worker_resumes_the_finetune_with_the_same_losses(service: FinetuneService):
    if service.reference is None:  # run alone: make the uninterrupted run first
        reference_job = service.submit_finetune(**service.lora_spec(f"ref-{uuid.uuid4().hex[:6]}"))
        service.succeeded(reference_job)
        service.reference = service.losses(reference_job)
    job_id = service.submit_finetune(**service.lora_spec(f"killed-{uuid.uuid4().hex[:6]}"))
    kill_when_past(service, job_id, 15, "trainplane.runtime.local")
    detail = service.succeeded(job_id)
    assert len(detail["attempts"]) == 1  # Ray Train restarted the workers in place
    found = re.search(r"resumed from checkpoint step (\d+)", service.logs(job_id))
    assert found and int(found.group(1)) >= 10
    resumed = service.losses(job_id)
    assert set(range(int(found.group(1)) + 1, STEPS + 1)) <= set(resumed)
    for step, loss in resumed.items():
        assert loss == pytest.approx(service.reference[step], rel=1e-5, abs=1e-6), step
