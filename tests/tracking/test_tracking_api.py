"""What the API shows of tracking: a job's run and model, registered models
with their jobs, and jobs compared side by side."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.factories import make_job, make_project
from tests.tracking.conftest import Jobs
from tests.tracking.test_tracking_loop import loss, run_pass
from trainplane.api.app import create_app
from trainplane.config import Settings
from trainplane.jobs.states import JobStatus
from trainplane.net import free_port
from trainplane.services.access import Caller
from trainplane.services.registered_models import list_models
from trainplane.tracking.client import MlflowTracking, tracking_config

pytestmark = pytest.mark.usefixtures("one_rank_group")


def client_for(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture
def api(tracking_settings: Settings) -> Iterator[TestClient]:
    yield from client_for(tracking_settings)


def test_a_job_shows_its_run_metrics_and_registered_model(
    api: TestClient, jobs: Jobs, sessions, tracking_settings
):
    answer = api.post("/v1/jobs", json=jobs.spec(entrypoint={"function": "t:f"}))
    assert answer.status_code == 201, answer.text
    queued = answer.json()
    assert queued["tracking"]["status"] == "not_started"
    assert queued["tracking"]["experiment"] == jobs.experiment

    job_id, attempt_id = jobs.running()
    assert api.get(f"/v1/jobs/{job_id}").json()["tracking"]["status"] == "pending"
    jobs.report(job_id, attempt_id, range(1, 6), loss)
    run_pass(tracking_settings, sessions)
    shown = api.get(f"/v1/jobs/{job_id}").json()
    assert shown["tracking"]["status"] == "active" and shown["tracking"]["run_id"]
    assert shown["latest_metrics"] == {"loss": loss(5), "lr": 0.1}
    assert shown["registered_model"] is None

    jobs.export(job_id)
    jobs.end(job_id, JobStatus.SUCCEEDED)
    run_pass(tracking_settings, sessions)
    shown = api.get(f"/v1/jobs/{job_id}").json()
    assert shown["tracking"]["status"] == "finished" and shown["tracking"]["error"] is None
    assert shown["registered_model"] == {
        "name": jobs.model,
        "version": "1",
        "alias": "candidate",
        "uri": f"models:/{jobs.model}/1",
    }


def test_a_server_that_does_not_track_says_so(settings: Settings, jobs: Jobs):
    job_id, _ = jobs.running()
    off = settings.model_copy(update={"tracking_enabled": False})
    for client in client_for(off):
        assert client.get(f"/v1/jobs/{job_id}").json()["tracking"]["status"] == "disabled"


def test_models_list_versions_with_their_jobs_and_live_aliases(
    api: TestClient, jobs: Jobs, sessions, tracking_settings, mlflow_client
):
    ids = []
    for _ in range(2):  # one after the other: versions 1 and 2
        job_id, _ = jobs.running()
        jobs.export(job_id)
        jobs.end(job_id, JobStatus.SUCCEEDED)
        run_pass(tracking_settings, sessions)
        ids.append(job_id)
    # Someone moves the alias in MLflow: the list shows MLflow's truth.
    mlflow_client.set_registered_model_alias(jobs.model, "production", "1")
    listing = api.get("/v1/models").json()
    assert listing["mlflow_error"] is None
    (model,) = [m for m in listing["items"] if m["name"] == jobs.model]
    assert [v["version"] for v in model["versions"]] == ["2", "1"]
    newest, oldest = model["versions"]
    assert newest["aliases"] == ["candidate"] and oldest["aliases"] == ["production"]
    assert (newest["job"]["job_id"], oldest["job"]["job_id"]) == (ids[1], ids[0])
    assert newest["status"] == "READY" and newest["run_id"] == newest["job"]["run_id"]


def test_models_list_pages_by_name_and_is_scoped_by_project(
    jobs: Jobs, sessions, tracking_settings
):
    for name in ("a", "b"):
        job_id, _ = jobs.running(register_model={"name": f"{jobs.model}-{name}"})
        jobs.export(job_id)
        jobs.end(job_id, JobStatus.SUCCEEDED)
    run_pass(tracking_settings, sessions)
    mlflow = MlflowTracking(tracking_config(tracking_settings))
    admin = Caller.local_admin()
    with sessions() as session:
        first = list_models(session, admin, mlflow, limit=1, after=None)
        second = list_models(session, admin, mlflow, limit=1, after=first.next_cursor)
        other = make_project(session, f"other-{jobs.unique}")
        outsider = Caller(subject="x", project_ids=frozenset({other.id}))
        hidden = list_models(session, outsider, mlflow, limit=10, after=None)
    assert [m.name for m in first.items] == [f"{jobs.model}-a"] and first.next_cursor
    assert [m.name for m in second.items] == [f"{jobs.model}-b"] and second.next_cursor is None
    assert hidden.items == []


def test_models_list_still_answers_when_mlflow_does_not(jobs: Jobs, sessions, tracking_settings):
    job_id, _ = jobs.running()
    jobs.export(job_id)
    jobs.end(job_id, JobStatus.SUCCEEDED)
    run_pass(tracking_settings, sessions)
    down = tracking_settings.model_copy(
        update={"mlflow_tracking_uri": f"http://127.0.0.1:{free_port()}"}
    )
    for client in client_for(down):
        listing = client.get("/v1/models").json()
    assert "MLflow at http://127.0.0.1" in listing["mlflow_error"]
    (model,) = [m for m in listing["items"] if m["name"] == jobs.model]
    assert [(v["version"], v["job"]["job_id"], v["status"]) for v in model["versions"]] == [
        ("1", job_id, None)
    ]


def test_compare_shows_the_differing_fields_and_final_metrics(api: TestClient, jobs: Jobs):
    ddp, ddp_attempt = jobs.running(strategy={"type": "ddp"})
    fsdp, fsdp_attempt = jobs.running(strategy={"type": "fsdp"})
    jobs.report(ddp, ddp_attempt, range(1, 4), loss)
    jobs.report(fsdp, fsdp_attempt, range(1, 6), lambda s: 3.0 / s)
    jobs.end(ddp, JobStatus.SUCCEEDED, minutes=60)
    comparison = api.get("/v1/jobs/compare", params={"ids": f"{ddp},{fsdp}"}).json()
    assert [j["id"] for j in comparison["jobs"]] == [ddp, fsdp]
    assert comparison["jobs"][0]["gpu_hours"] == pytest.approx(4.0)
    assert comparison["jobs"][0]["cost"] == pytest.approx(10.0)
    differing = {d["field"]: d["values"] for d in comparison["spec_differences"]}
    assert differing["strategy.type"] == ["ddp", "fsdp"]
    assert "resources.gpus" not in differing
    metrics = {m["name"]: m["values"] for m in comparison["metrics"]}
    assert metrics["loss"] == [loss(3), 3.0 / 5]


@pytest.mark.parametrize(
    ("ids", "status", "field"),
    [("{a}", 422, "ids"), ("{a},{a}", 422, "ids"), ("{a},nope", 404, None), ("", 422, "ids")],
)
def test_compare_refuses_what_it_cannot_compare(api: TestClient, jobs: Jobs, ids, status, field):
    job_id, _ = jobs.running()
    answer = api.get("/v1/jobs/compare", params={"ids": ids.format(a=job_id)})
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    if field:
        assert answer.json()["errors"][0]["field"] == field


def test_compare_treats_another_projects_job_as_unknown(jobs: Jobs, sessions):
    from trainplane.errors import NotFoundError
    from trainplane.services.compare import compare_jobs

    mine, _ = jobs.running()
    with sessions() as session:
        other = make_project(session, f"o-{jobs.unique}")
        theirs = make_job(session, project_id=other.id, spec=jobs.spec()).id
        caller = Caller(subject="me", project_ids=frozenset({"0" * 26}))
        with pytest.raises(NotFoundError):
            compare_jobs(session, caller, [mine, theirs])
