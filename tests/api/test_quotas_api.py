"""Project quotas: GPUs in use at once and GPU-hours per calendar month, as
the placement pass, the queue's reasons and submissions honour them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from tests.factories import make_cluster, small_spec
from trainplane.db.base import utcnow
from trainplane.db.models import JobAttempt
from trainplane.services.placement import place_queued_jobs
from trainplane.services.quotas import month_start


def submit(api, name, gpus, project="default"):
    created = api.post("/v1/jobs", json=small_spec(name, gpus) | {"project": project})
    assert created.status_code == 201, created.text
    return created.json()["id"]


def status(api, job_id):
    job = api.get(f"/v1/jobs/{job_id}").json()
    return job["status"], job["reason"]


def test_jobs_beyond_the_gpu_quota_wait_with_the_reason_while_others_start(api, session):
    make_cluster(session, "big", gpus=16)
    api.post("/v1/projects", json={"name": "vision"})
    assert api.patch("/v1/projects/vision", json={"max_gpus": 4}).status_code == 200
    first, second = submit(api, "v1", 4, "vision"), submit(api, "v2", 2, "vision")
    other = submit(api, "d1", 8)
    placed = {job for job, _ in place_queued_jobs(session, utcnow()).placed}
    assert placed == {first, other}
    assert status(api, second) == ("QUEUED", "quota: project vision uses 4 of 4 GPUs")
    # The list says the same.
    listed = {j["id"]: j for j in api.get("/v1/jobs", params={"project": "vision"}).json()["items"]}
    assert listed[second]["reason"] == "quota: project vision uses 4 of 4 GPUs"
    # Raising the quota lets it start at the next pass.
    api.patch("/v1/projects/vision", json={"max_gpus": 6})
    assert {j for j, _ in place_queued_jobs(session, utcnow()).placed} == {second}


def test_a_job_bigger_than_the_gpu_quota_is_refused_at_submit(api, session):
    make_cluster(session, "big", gpus=16)
    api.patch("/v1/projects/default", json={"max_gpus": 4})
    refused = api.post("/v1/jobs", json=small_spec("huge", 8))
    assert refused.status_code == 422
    error = refused.json()["errors"][0]
    assert error["field"] == "resources.gpus"
    assert (
        error["message"]
        == "project default may use at most 4 GPUs at once (quota); this job asks for 8"
    )
    assert api.post("/v1/jobs/plan", json=small_spec("huge", 8)).status_code == 422
    assert api.get("/v1/jobs").json()["items"] == []


def test_a_spent_monthly_budget_holds_new_jobs_until_it_is_raised(api, session):
    cluster = make_cluster(session, "big", gpus=16)
    api.patch("/v1/projects/default", json={"gpu_hours_per_month": 10})
    done = submit(api, "spent", 4)
    assert place_queued_jobs(session, utcnow()).placed
    # It ran 3 hours on 4 GPUs this month (and some before the month began,
    # which does not count).
    now = utcnow()
    start = max(month_start(now) - timedelta(hours=5), now - timedelta(hours=8))
    with session.begin():
        session.execute(
            update(JobAttempt)
            .where(JobAttempt.job_id == done)
            .values(
                status="SUCCEEDED",
                cluster_id=cluster.id,
                started_at=start,
                finished_at=max(start, month_start(now)) + timedelta(hours=3),
            )
        )
    waiting = submit(api, "next", 1)
    assert place_queued_jobs(session, utcnow()).placed == []
    state, reason = status(api, waiting)
    assert state == "QUEUED" and reason == (
        "quota: project default used 12.0 of its 10 GPU-hours this month"
    )
    api.patch("/v1/projects/default", json={"gpu_hours_per_month": None})
    assert [j for j, _ in place_queued_jobs(session, utcnow()).placed] == [waiting]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_gpus": 0}, "max_gpus"),
        ({"gpu_hours_per_month": -1}, "gpu_hours_per_month"),
        ({"weight": 0}, "weight"),
        ({"weight": None}, "weight"),
        ({"colour": 1}, "colour"),
    ],
)
def test_bad_quotas_are_422_naming_the_field(api, body, field):
    response = api.patch("/v1/projects/default", json=body)
    assert response.status_code == 422 and response.json()["errors"][0]["field"] == field


def run_flood(api, session, weights, rounds=12):
    """Two projects flood a 4-slot cluster with 1-GPU jobs; each round the
    running jobs end and a placement pass runs. Returns GPU-slots per project."""
    cluster = make_cluster(session, "four", gpus=4)
    for project, weight in weights.items():
        api.post("/v1/projects", json={"name": project})
        api.patch(f"/v1/projects/{project}", json={"weight": weight})
    # a submits all its jobs first: FIFO alone would give it everything.
    for project in weights:
        for i in range(rounds * 4):
            submit(api, f"{project}-{i}", 1, project)
    slots = dict.fromkeys(weights, 0)
    names = {}
    for _ in range(rounds):
        placed = place_queued_jobs(session, utcnow()).placed
        for job_id, _attempt in placed:
            name = names.get(job_id) or api.get(f"/v1/jobs/{job_id}").json()["project"]
            slots[name] += 1
        with session.begin():
            session.execute(
                update(JobAttempt)
                .where(JobAttempt.status == "PENDING")
                .values(status="SUCCEEDED", cluster_id=cluster.id)
            )
    return slots


@pytest.mark.parametrize(
    ("weights", "share_of_a"), [({"a": 1, "b": 1}, 0.5), ({"a": 3, "b": 1}, 0.75)]
)
def test_competing_projects_share_the_gpus_by_weight(api, session, weights, share_of_a):
    slots = run_flood(api, session, weights)
    total = sum(slots.values())
    assert total == 12 * 4
    assert abs(slots["a"] / total - share_of_a) <= 0.1, slots


def test_plan_shows_where_fair_share_puts_a_new_job(api, session):
    make_cluster(session, "one", gpus=1)
    for project in ("a", "b"):
        api.post("/v1/projects", json={"name": project})
    for i in range(3):
        submit(api, f"a-{i}", 1, "a")
    planned = api.post("/v1/jobs/plan", json=small_spec("b-0", 1) | {"project": "b"}).json()
    # b holds nothing and a is ahead only by one turn: b's job comes second.
    assert planned["placement"]["queue_position"] == 2
