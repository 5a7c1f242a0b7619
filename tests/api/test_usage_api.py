"""``GET /v1/usage`` and the GPU time and cost on jobs: attempts accrue
GPU-hours at their cluster's price, clipped to the asked window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from tests.factories import make_attempt, make_cluster, make_job, make_project, train_spec
from trainplane.db.models import JobAttempt
from trainplane.jobs.states import JobStatus

T0 = datetime(2026, 11, 10, 22, 0, tzinfo=UTC)


def ran(session, job_id, cluster_id, start, hours, number=1):
    attempt = make_attempt(
        session, job_id, number=number, status="SUCCEEDED", cluster_id=cluster_id
    )
    with session.begin():
        session.execute(
            update(JobAttempt)
            .where(JobAttempt.id == attempt.id)
            .values(started_at=start, finished_at=start + timedelta(hours=hours))
        )


@pytest.fixture
def usage_jobs(session):
    """Two projects on a cluster at 2.50 per GPU-hour: vision has a 4-GPU job
    of 3 h that crosses midnight, restarted once for 1 h more; nlp one 2-GPU
    hour on a free cluster."""
    vision, nlp = make_project(session, "vision"), make_project(session, "nlp")
    priced = make_cluster(session, "priced", gpus=8, price_per_gpu_hour=2.5)
    free = make_cluster(session, "free", gpus=8)
    big = make_job(
        session,
        status=JobStatus.SUCCEEDED,
        project_id=vision.id,
        spec=train_spec(project="vision", resources={"gpus": 4}),
    )
    ran(session, big.id, priced.id, T0, 3)
    ran(session, big.id, priced.id, T0 + timedelta(hours=4), 1, number=2)
    small = make_job(
        session,
        status=JobStatus.SUCCEEDED,
        project_id=nlp.id,
        name="small",
        spec=train_spec(project="nlp", name="small", resources={"gpus": 2}, tracking={}),
    )
    ran(session, small.id, free.id, T0, 1)
    return big, small


def window(since, until):
    return {"since": since.isoformat(), "until": until.isoformat()}


def test_usage_sums_gpu_hours_and_cost_by_project_experiment_and_job(api, usage_jobs):
    big, small = usage_jobs
    body = api.get("/v1/usage", params=window(T0 - timedelta(days=1), T0 + timedelta(days=1)))
    assert body.status_code == 200, body.text
    usage = body.json()
    # vision's first attempt (3 h on 4 GPUs) was replaced by a restart.
    assert usage["total"] == {"gpu_hours": 18.0, "cost": 40.0, "jobs": 2, "lost_gpu_hours": 12.0}
    assert usage["by_project"] == [
        {"project": "nlp", "gpu_hours": 2.0, "cost": 0.0, "jobs": 1, "lost_gpu_hours": 0.0},
        {"project": "vision", "gpu_hours": 16.0, "cost": 40.0, "jobs": 1, "lost_gpu_hours": 12.0},
    ]
    # A spec without tracking.experiment is tracked under its project's name.
    assert [(e["project"], e["experiment"]) for e in usage["by_experiment"]] == [
        ("nlp", "nlp"),
        ("vision", "mnist"),
    ]
    assert [j["id"] for j in usage["by_job"]] == [big.id, small.id]
    days = {d["day"]: d["gpu_hours"] for d in usage["by_day"]}
    assert list(days) == ["2026-11-09", "2026-11-10", "2026-11-11"]
    # 22:00-01:00 and 02:00-03:00 on 4 GPUs; nlp's hour is before midnight.
    assert days["2026-11-10"] == {"vision": 8.0, "nlp": 2.0}
    assert days["2026-11-11"] == {"vision": 8.0}
    assert days["2026-11-09"] == {}


def test_usage_clips_attempts_to_the_window_and_filters_by_project(api, usage_jobs):
    midnight = datetime(2026, 11, 11, tzinfo=UTC)
    usage = api.get(
        "/v1/usage", params=window(midnight, midnight + timedelta(hours=2)) | {"project": "vision"}
    ).json()
    # Only the first attempt's 00:00-01:00 falls in the window.
    assert usage["total"] == {"gpu_hours": 4.0, "cost": 10.0, "jobs": 1, "lost_gpu_hours": 4.0}
    assert [p["project"] for p in usage["by_project"]] == ["vision"]


@pytest.mark.parametrize(
    "params",
    [
        {"since": "2026-11-02T00:00:00Z", "until": "2026-11-01T00:00:00Z"},
        {"since": "2024-01-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
        {"since": "yesterday"},
        {"project": "Not A Project"},
    ],
)
def test_bad_windows_are_422_naming_the_field(api, params):
    response = api.get("/v1/usage", params=params)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] in params


def test_jobs_carry_their_gpu_time_cost_and_duration(api, usage_jobs):
    big, small = usage_jobs
    listed = {j["id"]: j for j in api.get("/v1/jobs").json()["items"]}
    assert (listed[big.id]["gpu_hours"], listed[big.id]["cost"]) == (16.0, 40.0)
    assert (listed[small.id]["gpu_hours"], listed[small.id]["cost"]) == (2.0, 0.0)
    # The restart replaced big's first attempt: 3 h on 4 GPUs.
    assert (listed[big.id]["lost_gpu_hours"], listed[small.id]["lost_gpu_hours"]) == (12.0, 0.0)
    detail = api.get(f"/v1/jobs/{big.id}").json()
    assert (detail["gpu_hours"], detail["cost"]) == (16.0, 40.0)


def test_a_queued_job_has_no_usage_and_no_duration(api):
    job = api.post("/v1/jobs", json=train_spec(resources={"gpus": 1})).json()
    assert (job["gpu_hours"], job["cost"], job["duration_seconds"]) == (0.0, 0.0, None)
