"""Tracking end to end: jobs submitted to a real ``trainplane server``, trained
on a real local Ray cluster, written to real MLflow (the embedded SQLite store;
and an ``mlflow server`` on PostgreSQL with its artifacts on S3, stopped
mid-training), their models registered and loaded back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from tests.factories import example_module
from tests.runtime.test_training import (
    MLP,
    S3_CREDENTIALS,
    STEPS,
    Service,
    kill_when_past,
    start_server,
)
from trainplane.backends.local_ray import LocalRayHead
from trainplane.cli.main import app
from trainplane.testing.mlflow_server import MlflowServer
from trainplane.testing.server import ServerProcess

PROBE = torch.randn(9, 32, generator=torch.Generator().manual_seed(3))


class TrackedService(Service):
    def __init__(self, url: str, home: Path, s3_endpoint: str, mlflow_uri: str) -> None:
        super().__init__(url, home, s3_endpoint)
        self.mlflow_uri = mlflow_uri
        self.jobs: dict[str, str] = {}  # by test purpose, for tests that build on others

    def tracked(self, job_id: str, timeout: float = 120) -> dict[str, Any]:
        """The job once its MLflow run is complete."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job["tracking"]["status"] == "finished":
                return job
            time.sleep(0.5)
        raise AssertionError(f"tracking of {job_id} did not finish: {job['tracking']}")

    def wait_for(self, check: Any, what: str, timeout: float = 180) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.3)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")

    def client(self) -> Any:
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.mlflow_uri, registry_uri=self.mlflow_uri)


def start_tracked_server(
    home: Path, ray_head: LocalRayHead, s3_endpoint: str, mlflow_uri: str, **env: str
) -> ServerProcess:
    return start_server(
        home,
        ray_head,
        s3_endpoint,
        MLFLOW_TRACKING_URI=mlflow_uri,
        TRAINPLANE_TRACKING_INTERVAL_SECONDS="0.5",
        **env,
    )


@pytest.fixture(scope="module")
def service(
    ray_head: LocalRayHead, s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TrackedService]:
    """The embedded default: MLflow's SQLite store beside trainplane's."""
    home = tmp_path_factory.mktemp("tracked")
    mlflow_uri = f"sqlite:///{home / 'mlflow.db'}"
    with start_tracked_server(home, ray_head, s3_endpoint, mlflow_uri) as server:
        yield TrackedService(server.url, home, s3_endpoint, mlflow_uri)


@pytest.fixture
def mlflow_env(service: TrackedService, monkeypatch: pytest.MonkeyPatch) -> None:
    """mlflow's own loading functions find the same store."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", service.mlflow_uri)


def checkpoint_model(state: dict[str, torch.Tensor]) -> torch.nn.Module:
    model = example_module("mlp").MLP(32, 128, 8)
    model.load_state_dict(state)
    return model.eval()


def last_checkpoint(service: TrackedService, job_id: str) -> str:
    listed = service.http.get(f"/v1/jobs/{job_id}/checkpoints").json()["checkpoints"]
    assert listed[0]["step"] == STEPS
    return listed[0]["uri"]


def test_a_ddp_job_is_a_run_and_registers_a_model_that_loads_as_trained(
    service: TrackedService, mlflow_env: None
):
    import mlflow.pytorch

    job_id = service.submit("ddp", register_model={"name": "mlp-ddp", "alias": "candidate"})
    service.succeeded(job_id)
    job = service.tracked(job_id)
    service.jobs["ddp"] = job_id
    assert job["tracking"]["error"] is None
    assert job["registered_model"] == {
        "name": "mlp-ddp",
        "version": "1",
        "alias": "candidate",
        "uri": "models:/mlp-ddp/1",
    }
    client = service.client()
    run = client.get_run(job["tracking"]["run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == "mlp-ddp"
    params = run.data.params
    assert params["strategy.type"] == "ddp" and params["resources.gpus"] == "2"
    assert params["cluster"] == "local" and params["entrypoint.args.steps"] == str(STEPS)
    tags = run.data.tags
    assert tags["trainplane.job_id"] == job_id and tags["trainplane.status"] == "SUCCEEDED"
    assert tags["trainplane.attempts"] == "1" and tags["trainplane.project"] == "default"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [m.step for m in history] == list(range(1, STEPS + 1))  # one per reported step
    assert [m.value for m in history] == [service.losses(job_id)[s] for s in range(1, STEPS + 1)]
    assert {"step_time_s", "samples_per_s", "trainplane.gpu_hours"} <= set(run.data.metrics)
    version = client.get_model_version_by_alias("mlp-ddp", "candidate")
    assert version.run_id == run.info.run_id and version.tags["trainplane.job_id"] == job_id

    cli = CliRunner()
    listed = cli.invoke(app, ["--url", service.url, "models", "list"])
    assert listed.exit_code == 0, listed.output
    (row,) = [line.split() for line in listed.stdout.splitlines() if line.startswith("mlp-ddp ")]
    assert row[:5] == ["mlp-ddp", "1", "candidate", "READY", job_id]
    shown = cli.invoke(app, ["--url", service.url, "jobs", "get", job_id]).stdout
    assert f"run {run.info.run_id}" in shown and "mlp-ddp version 1 alias candidate" in shown

    loaded = mlflow.pytorch.load_model("models:/mlp-ddp@candidate")
    step_folder = Path(last_checkpoint(service, job_id))
    trained = checkpoint_model(torch.load(step_folder / "model.pt", weights_only=True))
    with torch.no_grad():
        assert torch.allclose(loaded(PROBE), trained(PROBE), atol=1e-5)
    assert mlflow.pyfunc.load_model("models:/mlp-ddp@candidate").predict(PROBE.numpy()).shape == (
        9,
        8,
    )


def test_jobs_compare_shows_ddp_against_fsdp2(service: TrackedService, mlflow_env: None):
    import mlflow.pytorch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    ddp = service.jobs.get("ddp") or service.submit("ddp")
    fsdp = service.submit("fsdp", register_model={"name": "mlp-fsdp"})
    service.succeeded(fsdp)
    service.succeeded(ddp)
    service.tracked(fsdp)

    # The model gathered from FSDP2 shards on two Ray workers is the trained one.
    converted = service.home / f"{fsdp}.pt"
    dcp_to_torch_save(Path(last_checkpoint(service, fsdp)) / "dcp", converted)
    trained = checkpoint_model(torch.load(converted, weights_only=True)["model"])
    loaded = mlflow.pytorch.load_model("models:/mlp-fsdp/1")
    with torch.no_grad():
        assert torch.allclose(loaded(PROBE), trained(PROBE), atol=1e-5)

    shown = CliRunner().invoke(app, ["--url", service.url, "jobs", "compare", ddp, fsdp])
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    (strategy,) = [line for line in lines if line.startswith("strategy.type")]
    assert strategy.split() == ["strategy.type", "ddp", "fsdp"]
    (loss,) = [line for line in lines if line.split()[:1] == ["loss"]]
    finals = [service.job(j)["latest_metrics"]["loss"] for j in (ddp, fsdp)]
    assert loss.split()[1:] == [f"{value:.6g}" for value in finals]


def test_a_job_retried_after_a_lost_attempt_registers_one_version(service: TrackedService):
    job_id = service.submit("ddp", sleep=0.1, register_model={"name": "mlp-retried"})
    kill_when_past(service, job_id, 15, "trainplane.runtime.driver")
    detail = service.succeeded(job_id)
    assert [a["status"] for a in detail["attempts"]] == ["FAILED", "SUCCEEDED"]
    job = service.tracked(job_id)
    client = service.client()
    assert len(client.search_model_versions("name = 'mlp-retried'")) == 1
    run = client.get_run(job["tracking"]["run_id"])
    assert run.data.tags["trainplane.attempts"] == "2"
    assert run.data.tags["trainplane.attempt.1"].startswith("FAILED")
    steps = {m.step for m in client.get_metric_history(run.info.run_id, "loss")}
    assert set(range(16, STEPS + 1)) <= steps  # every step of the resumed attempt


def test_a_failed_job_registers_nothing(service: TrackedService):
    name = f"mlp-failed-{uuid.uuid4().hex[:6]}"
    body = {
        "kind": "train",
        "name": "mlp-fails",
        "entrypoint": {
            "function": "train:train_loop",
            "args": {"steps": "not a number"},
            "working_dir": str(MLP),
        },
        "resources": {"gpus": 2},
        "register_model": {"name": name},
    }
    job_id = service.http.post("/v1/jobs", json=body).json()["id"]
    assert service.wait(job_id)["status"] == "FAILED"
    job = service.tracked(job_id)
    assert job["registered_model"] is None
    client = service.client()
    assert client.get_run(job["tracking"]["run_id"]).info.status == "FAILED"
    assert client.search_model_versions(f"name = '{name}'") == []


def test_a_job_succeeds_through_an_mlflow_outage_and_its_run_catches_up(
    ray_head: LocalRayHead,
    s3_endpoint: str,
    s3_bucket: str,
    postgres_server: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    """MLflow on PostgreSQL, its artifacts on S3; stopped while the job trains."""
    import mlflow.pytorch

    s3 = {"MLFLOW_S3_ENDPOINT_URL": s3_endpoint, **S3_CREDENTIALS}
    mlflow_server = MlflowServer(
        postgres_server.create_database("mlflow"),
        f"s3://{s3_bucket}/mlflow",
        env=s3,
        log_path=tmp_path / "mlflow.log",
    ).start()
    try:
        server = start_tracked_server(
            tmp_path,
            ray_head,
            s3_endpoint,
            mlflow_server.url,
            TRAINPLANE_TRACKING_MAX_BACKOFF_SECONDS="2",
        )
    except BaseException:
        mlflow_server.stop()
        raise
    try:
        service = TrackedService(server.url, tmp_path, s3_endpoint, mlflow_server.url)
        job_id = service.submit(
            "ddp", sleep=0.25, register_model={"name": "mlp-outage", "alias": "candidate"}
        )
        service.wait_for(
            lambda: (job := service.job(job_id))["tracking"]["run_id"] and job["progress"],
            "the run to exist and the job to report",
        )
        mlflow_server.stop()
        detail = service.succeeded(job_id)
        assert detail["tracking"]["status"] == "active"  # not complete without MLflow
        service.wait_for(
            lambda: service.job(job_id)["tracking"]["error"], "the tracking error to show"
        )
        assert "MLflow at http://127.0.0.1" in service.job(job_id)["tracking"]["error"]

        mlflow_server.start()
        job = service.tracked(job_id)
        assert job["tracking"]["error"] is None and job["registered_model"]["version"] == "1"
        client = service.client()
        history = client.get_metric_history(job["tracking"]["run_id"], "loss")
        assert [m.step for m in history] == list(range(1, STEPS + 1))
        monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
        loaded = mlflow.pytorch.load_model("models:/mlp-outage@candidate")  # from S3
        assert loaded(PROBE).shape == (9, 8)
    finally:
        server.stop()
        mlflow_server.stop()
