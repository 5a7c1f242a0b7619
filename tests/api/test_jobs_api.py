"""The jobs API against the real app and a real database (PostgreSQL and SQLite)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from tests.factories import (
    count_rows,
    insert_jobs,
    make_job,
    make_project,
    train_spec,
)
from tests.spec_cases import INVALID_SPECS
from trainplane.db.base import utcnow
from trainplane.jobs.states import JobStatus


def _events(api, job_id):
    response = api.get(f"/v1/jobs/{job_id}/events")
    assert response.status_code == 200
    return response.json()["items"]


@pytest.mark.parametrize("kind", ["train", "finetune"])
def test_valid_spec_is_queued_with_one_event(api, session, kind, finetune_files):
    make_spec = train_spec if kind == "train" else finetune_files.spec
    response = api.post("/v1/jobs", json=make_spec())
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "QUEUED"
    assert job["reason"]
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["spec"]["kind"] == make_spec()["kind"]
    assert job["gpus"] == make_spec()["resources"]["gpus"]

    events = _events(api, job["id"])
    assert [(e["from_status"], e["to_status"]) for e in events] == [(None, "QUEUED")]
    assert count_rows(session) == (1, 1)

    fetched = api.get(f"/v1/jobs/{job['id']}").json()
    # Reading a queued job adds where it stands in the queue, and why it waits.
    assert fetched["queue_position"] == 1
    assert fetched["reason"] == "waiting for a cluster: none is registered"
    live = {"reason", "queue_position", "attempts"}
    assert {k: v for k, v in fetched.items() if k not in live} == {
        k: v for k, v in job.items() if k not in live
    }


def test_stored_spec_has_defaults_filled_in(api):
    minimal = {"kind": "train", "name": "min", "entrypoint": {"command": ["true"]}}
    job = api.post("/v1/jobs", json=minimal).json()
    assert job["spec"]["resources"]["gpus"] == 1
    assert job["spec"]["checkpoint"]["resume"] == "auto"
    assert job["project"] == "default"


@pytest.mark.parametrize(
    ("case", "spec", "field"), INVALID_SPECS, ids=[c[0] for c in INVALID_SPECS]
)
def test_invalid_spec_is_422_naming_the_field_and_writes_nothing(api, session, case, spec, field):
    response = api.post("/v1/jobs", json=spec)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["status"] == 422
    fields = [e["field"] for e in problem["errors"]]
    assert any(f == field or f.startswith(field + ".") for f in fields), (case, fields)
    assert field.split(".")[0] in problem["detail"]
    assert count_rows(session) == (0, 0)


@pytest.mark.parametrize(
    ("body", "content_type", "field"),
    [
        ('{"kind": "train", ', "application/json", "body"),
        ("[1, 2]", "application/json", "body"),
        ("null", "application/json", "body"),
    ],
)
def test_malformed_bodies_are_422(api, session, body, content_type, field):
    response = api.post("/v1/jobs", content=body, headers={"content-type": content_type})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == field
    assert count_rows(session) == (0, 0)


def test_unknown_project_is_422_naming_project(api, session):
    response = api.post("/v1/jobs", json=train_spec(project="nope"))
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "project"
    assert count_rows(session) == (0, 0)


def test_oversized_body_is_413(api, session):
    spec = train_spec(tracking={"tags": {f"k{i}": "x" * 4000 for i in range(300)}})
    response = api.post("/v1/jobs", json=spec)
    assert response.status_code == 413
    assert count_rows(session) == (0, 0)


def test_oversized_chunked_body_is_413(api, session):
    # No Content-Length: the limit must hold while the body streams in.
    def chunks():
        yield b'{"kind": "train", "name": "x", "tracking": {"tags": {"a": "'
        for _ in range(300):
            yield b"x" * 4096
        yield b'"}}}'

    response = api.post("/v1/jobs", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.headers["content-type"].startswith("application/problem+json")
    assert count_rows(session) == (0, 0)


def test_idempotent_resubmission_returns_the_same_job(api, session):
    headers = {"Idempotency-Key": "build-1234"}
    first = api.post("/v1/jobs", json=train_spec(), headers=headers)
    # Same content, different key order: still the same spec.
    reordered = dict(reversed(list(train_spec().items())))
    second = api.post("/v1/jobs", json=reordered, headers=headers)
    assert first.status_code == 201
    assert second.status_code == 200
    assert second.headers["idempotent-replayed"] == "true"
    assert first.json()["id"] == second.json()["id"]
    assert count_rows(session) == (1, 1)


def test_idempotency_key_reused_with_another_body_is_409(api, session):
    headers = {"Idempotency-Key": "build-1234"}
    first = api.post("/v1/jobs", json=train_spec(), headers=headers)
    clash = api.post("/v1/jobs", json=train_spec(name="other"), headers=headers)
    assert clash.status_code == 409
    assert first.json()["id"] in clash.json()["detail"]
    assert count_rows(session) == (1, 1)


def test_without_a_key_every_post_is_a_new_job(api, session):
    ids = {api.post("/v1/jobs", json=train_spec()).json()["id"] for _ in range(3)}
    assert len(ids) == 3
    assert count_rows(session) == (3, 3)


def test_concurrent_submissions_with_one_key_make_one_job(api, session):
    headers = {"Idempotency-Key": "race"}
    with ThreadPoolExecutor(8) as pool:
        responses = list(
            pool.map(lambda _: api.post("/v1/jobs", json=train_spec(), headers=headers), range(16))
        )
    assert {r.status_code for r in responses} <= {200, 201}
    assert sum(r.status_code == 201 for r in responses) == 1
    assert len({r.json()["id"] for r in responses}) == 1
    assert count_rows(session) == (1, 1)


def test_pagination_over_500_jobs_returns_each_once_in_order(api, session):
    # Ties on created_at (100 jobs share one instant) must still page exactly once.
    base = utcnow() - timedelta(hours=1)
    ids = []
    for minute in range(4):
        ids += insert_jobs(session, 100, created_at=base + timedelta(minutes=minute))
    ids += insert_jobs(session, 100, created_at=base + timedelta(minutes=10))
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 37} | ({"cursor": cursor} if cursor else {})
        page = api.get("/v1/jobs", params=params).json()
        assert len(page["items"]) <= 37
        seen += [(j["created_at"], j["id"]) for j in page["items"]]
        cursor, pages = page["next_cursor"], pages + 1
        if cursor is None:
            break
    assert len(seen) == 500 and len({s[1] for s in seen}) == 500
    assert {s[1] for s in seen} == set(ids)
    assert pages == 14  # ceil(500 / 37)
    keys = [(created, job_id) for created, job_id in seen]
    assert keys == sorted(keys, reverse=True)


def test_page_is_stable_when_new_jobs_arrive(api, session):
    insert_jobs(session, 10, created_at=utcnow() - timedelta(minutes=5))
    first = api.get("/v1/jobs", params={"limit": 5}).json()
    api.post("/v1/jobs", json=train_spec())  # newer than everything
    second = api.get("/v1/jobs", params={"limit": 5, "cursor": first["next_cursor"]}).json()
    assert not {j["id"] for j in first["items"]} & {j["id"] for j in second["items"]}
    assert len(second["items"]) == 5 and second["next_cursor"] is None


@pytest.mark.parametrize("limit", [0, 201, -1])
def test_limit_is_bounded(api, limit):
    response = api.get("/v1/jobs", params={"limit": limit})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "limit"


@pytest.mark.parametrize("cursor", ["garbage", "eyJ4IjoxfQ", "W10"])
def test_bad_cursor_is_422(api, cursor):
    response = api.get("/v1/jobs", params={"cursor": cursor})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "cursor"


def test_filters(api, session):
    vision = make_project(session, "vision")
    insert_jobs(session, 3, name="a")
    insert_jobs(session, 2, name="b", status=JobStatus.RUNNING)
    insert_jobs(session, 4, name="a", project_id=vision.id, status=JobStatus.FAILED)

    def ids(**params):
        response = api.get("/v1/jobs", params=params)
        assert response.status_code == 200, response.text
        return response.json()["items"]

    assert len(ids()) == 9
    assert len(ids(project="vision")) == 4
    assert {j["project"] for j in ids(project="vision")} == {"vision"}
    assert len(ids(project="default")) == 5
    assert ids(project="missing") == []
    assert len(ids(name="a")) == 7
    assert len(ids(status="RUNNING")) == 2
    assert len(ids(status=["RUNNING", "FAILED"])) == 6
    assert len(ids(project="default", name="a", status="QUEUED")) == 3
    assert api.get("/v1/jobs", params={"status": "DONE"}).status_code == 422


def test_cancel_a_queued_job(api):
    job = api.post("/v1/jobs", json=train_spec()).json()
    response = api.post(f"/v1/jobs/{job['id']}/cancel")
    assert response.status_code == 200
    assert response.json()["status"] == "CANCELLED"
    assert response.json()["finished_at"] is not None
    events = _events(api, job["id"])
    assert [e["to_status"] for e in events] == ["QUEUED", "CANCELLED"]
    again = api.post(f"/v1/jobs/{job['id']}/cancel")
    assert again.status_code == 409
    assert "CANCELLED" in again.json()["detail"]
    assert len(_events(api, job["id"])) == 2


@pytest.mark.parametrize(
    ("status", "expected"),
    [("RESTARTING", "CANCELLED"), ("STARTING", "CANCELLING"), ("RUNNING", "CANCELLING")],
)
def test_cancel_live_jobs(api, session, status, expected):
    job = make_job(session, status=JobStatus(status))
    response = api.post(f"/v1/jobs/{job.id}/cancel")
    assert response.status_code == 200
    assert response.json()["status"] == expected
    assert [e["to_status"] for e in _events(api, job.id)] == [expected]


def test_cancel_while_cancelling_changes_nothing(api, session):
    job = make_job(session, status=JobStatus.CANCELLING)
    response = api.post(f"/v1/jobs/{job.id}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "CANCELLING"
    assert _events(api, job.id) == []


@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED", "CANCELLED"])
def test_cancel_terminal_job_is_409(api, session, status):
    job = make_job(session, status=JobStatus(status))
    assert api.post(f"/v1/jobs/{job.id}/cancel").status_code == 409
    assert _events(api, job.id) == []


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/jobs/nope"), ("POST", "/v1/jobs/nope/cancel"), ("GET", "/v1/jobs/nope/events")],
)
def test_unknown_job_is_404_problem(api, method, path):
    response = api.request(method, path)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "nope" in response.json()["detail"]


def test_events_page_with_after(api, session):
    job = api.post("/v1/jobs", json=train_spec()).json()
    api.post(f"/v1/jobs/{job['id']}/cancel")
    first = api.get(f"/v1/jobs/{job['id']}/events", params={"limit": 1}).json()
    assert len(first["items"]) == 1 and first["next_after"] is not None
    rest = api.get(f"/v1/jobs/{job['id']}/events", params={"after": first["next_after"]}).json()
    assert [e["to_status"] for e in rest["items"]] == ["CANCELLED"]


def test_unknown_route_is_problem_json(api):
    response = api.get("/v1/nothing-here")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")


def test_openapi_documents_the_job_spec(api):
    schema = api.get("/openapi.json").json()
    assert "/v1/jobs" in schema["paths"]
    body = json.dumps(schema["paths"]["/v1/jobs"]["post"]["requestBody"])
    assert "TrainSpec" in body and "FinetuneSpec" in body
    assert "Idempotency-Key" in json.dumps(schema["paths"]["/v1/jobs"]["post"]["parameters"])
