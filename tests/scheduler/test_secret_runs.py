"""Project secrets in real runs on the local Ray cluster: a job's processes
find the value in their environment (they print whether its hash matches,
never the value), and it is nowhere else: not in the Ray job's description,
the logs, any API answer or page, the events, or the MLflow run. A secret
deleted after submit fails the attempt, naming it."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ray.job_submission import JobSubmissionClient

from tests.factories import small_spec
from tests.scheduler.conftest import api_on_a_port, register_local, wait_for
from trainplane.backends.local_ray import LocalRayHead
from trainplane.code_bundles import build_bundle
from trainplane.config import Settings
from trainplane.jobs.environment import REDACTED
from trainplane.serve.processes import running_scheduler

SECRET = "hf_" + os.urandom(12).hex()
EXPECTED = hashlib.sha256(SECRET.encode()).hexdigest()
CONFIG = "plain-config-" + os.urandom(4).hex()
# What every rank prints: whether $HF_TOKEN holds the secret, by its hash.
CHECK = (
    "import hashlib, os; v = os.environ.get('HF_TOKEN', ''); "
    "print('secret-check', hashlib.sha256(v.encode()).hexdigest() == os.environ['EXPECTED'], "
    "'rank', os.environ.get('RANK'), flush=True)"
)
CHECK_FUNCTION = f"def check(ctx):\n    {CHECK.replace('; ', chr(10) + '    ')}\n"
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


class Plane:
    """The API on a real port (runs reach it there) and a client of it."""

    def __init__(self, url: str, settings: Settings) -> None:
        self.url = url
        self.settings = settings
        self.http = httpx.Client(base_url=url, timeout=30)

    def submit(self, name: str, gpus: int, **entrypoint: object) -> str:
        spec = small_spec(
            name,
            gpus,
            entrypoint={
                "secrets": {"HF_TOKEN": "hf-token"},
                "env": {"EXPECTED": EXPECTED, "PLAIN": CONFIG},
                **entrypoint,
            },
        )
        answer = self.http.post("/v1/jobs", json=spec)
        assert answer.status_code == 201, answer.text
        return answer.json()["id"]

    def finished(self, job_id: str, timeout: float = 180) -> dict:
        return wait_for(
            lambda: (
                (job := self.http.get(f"/v1/jobs/{job_id}").json())["status"] in TERMINAL and job
            ),
            timeout,
            f"job {job_id} to end",
        )


@pytest.fixture
def plane(
    fast_settings: Settings, ray_head: LocalRayHead, db_url: str, tmp_path: Path
) -> Iterator[Plane]:
    """The API with tracking on (a store of this test's own), and the local
    cluster registered; the test starts the scheduler when its jobs are in."""
    tracked = fast_settings.model_copy(
        update={
            "tracking_enabled": True,
            "mlflow_tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
            "mlflow_artifacts": str(tmp_path / "mlflow-artifacts"),
            "tracking_interval_seconds": 0.2,
        }
    )
    with api_on_a_port(tracked) as settings:
        register_local(db_url, ray_head.address)
        plane = Plane(settings.advertise_url, settings)
        answer = plane.http.put("/v1/projects/default/secrets/hf-token", json={"value": SECRET})
        assert answer.status_code == 201, answer.text
        yield plane


def test_a_secret_reaches_every_rank_and_nothing_else(plane: Plane, ray_head: LocalRayHead):
    plane.http.put("/v1/projects/default/secrets/gone", json={"value": "soon deleted"})
    doomed = plane.submit("doomed", 1, command=["true"], secrets={"HF_TOKEN": "gone"})
    assert plane.http.delete("/v1/projects/default/secrets/gone").status_code == 204
    one = plane.submit("one-rank", 1, command=["python", "-c", CHECK])
    gang = plane.submit("two-ranks", 2, command=["python", "-c", CHECK])
    with running_scheduler(plane.settings):
        jobs = {job_id: plane.finished(job_id) for job_id in (doomed, one, gang)}
        wait_for(
            lambda: plane.http.get(f"/v1/jobs/{one}").json()["tracking"]["status"] == "finished",
            60,
            "the MLflow run to be closed",
        )

    assert jobs[doomed]["status"] == "FAILED"
    assert "project default has no secret 'gone' any more" in jobs[doomed]["reason"]
    for job_id, ranks in ((one, 1), (gang, 2)):
        assert jobs[job_id]["status"] == "SUCCEEDED", jobs[job_id]["reason"]
        log = plane.http.get(f"/v1/jobs/{job_id}/logs").text
        assert log.count("secret-check True") == ranks, log
        assert SECRET not in log

    # Ray's own description of every attempt: entrypoint, runtime_env, metadata.
    ray = JobSubmissionClient(ray_head.address)
    attempts = [a["id"] for job in jobs.values() for a in job["attempts"]]
    described = [ray.get_job_info(attempt).model_dump_json() for attempt in attempts]
    assert all(CONFIG in d for d in described)  # env is configuration: it is there
    assert not any(SECRET in d for d in described)
    assert not any(SECRET in ray.get_job_logs(attempt) for attempt in attempts)

    seen = "".join(
        plane.http.get(path).text
        for job_id in jobs
        for path in (f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/events", f"/jobs/{job_id}")
    )
    seen += "".join(
        plane.http.get(path).text
        for path in ("/v1/jobs", "/v1/audit", "/v1/projects/default/secrets", "/v1/usage")
    )
    assert SECRET not in seen and "hf-token" in seen

    # The MLflow run: parameters, tags and every artifact.
    from mlflow import MlflowClient

    mlflow = MlflowClient(tracking_uri=plane.settings.mlflow_tracking_uri)
    run_id = plane.http.get(f"/v1/jobs/{one}").json()["tracking"]["run_id"]
    run = mlflow.get_run(run_id)
    assert run.data.params["entrypoint.env.PLAIN"] == REDACTED
    recorded = json.dumps([run.data.params, run.data.tags])
    for artifact in mlflow.list_artifacts(run_id, "trainplane"):
        recorded += Path(mlflow.download_artifacts(run_id, artifact.path)).read_text()
    assert "trainplane/spec.json" in [a.path for a in mlflow.list_artifacts(run_id, "trainplane")]
    assert SECRET not in recorded and CONFIG not in recorded and "PLAIN" in recorded


@pytest.mark.postgres_only
def test_a_train_function_gets_the_secret_inline_and_in_ray_train_workers(plane: Plane):
    """A train function on one worker runs in the driver's own process; on
    two, in Ray Train's worker processes, which fetch the secret themselves."""
    bundle = build_bundle([("checks.py", CHECK_FUNCTION.encode())])
    uploaded = plane.http.post(
        "/v1/projects/default/bundles", content=bundle, headers={"Content-Type": "application/zip"}
    )
    assert uploaded.status_code == 201, uploaded.text
    code = uploaded.json()["digest"]
    ids = {
        ranks: plane.submit(f"function-{ranks}", ranks, function="checks:check", code=code)
        for ranks in (1, 2)
    }
    with running_scheduler(plane.settings):
        jobs = {ranks: plane.finished(job_id, timeout=240) for ranks, job_id in ids.items()}
    for ranks, job in jobs.items():
        log = plane.http.get(f"/v1/jobs/{job['id']}/logs").text
        assert job["status"] == "SUCCEEDED", (job["reason"], log[-2000:])
        assert log.count("secret-check True") == ranks, log
        assert SECRET not in log
