"""Project secrets over the API, on both databases: write-only values, keys
listed without values, the checks of a spec that names them, and the
runtime's fetch of an attempt's values with its attempt token.

Which role may do what is in the authorization matrix
(tests/api/test_authorization.py); here the caller is the local admin."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select, update

from tests.factories import count_rows, make_attempt, make_job, small_spec
from trainplane.db.access_models import AuditEvent, ProjectSecret
from trainplane.db.models import JobAttempt
from trainplane.jobs.states import JobStatus
from trainplane.services.attempt_tokens import TokenKey, attempt_token
from trainplane.services.secrets import MAX_VALUE_BYTES

VALUE = "hf_live-value-0123456789"


def _put(api, key, value, project="default"):
    return api.put(f"/v1/projects/{project}/secrets/{key}", json={"value": value})


def _fields(response):
    return [e["field"] for e in response.json().get("errors", [])]


def test_a_secret_is_set_replaced_listed_and_deleted_without_its_value(api, session):
    created = _put(api, "hf-token", VALUE)
    assert created.status_code == 201, created.text
    assert created.json()["key"] == "hf-token" and created.json()["created_by"] == "local"
    replaced = _put(api, "hf-token", VALUE + "-2")
    assert replaced.status_code == 200
    assert replaced.json()["created_at"] == created.json()["created_at"]
    assert replaced.json()["updated_at"] >= created.json()["updated_at"]
    _put(api, "a.first", "x")

    listing = api.get("/v1/projects/default/secrets")
    assert listing.status_code == 200
    assert [s["key"] for s in listing.json()["items"]] == ["a.first", "hf-token"]
    audit = api.get("/v1/audit").json()["items"]
    assert [(e["action"], e["target"]) for e in audit if e["action"].startswith("secret.")] == [
        ("secret.create", "hf-token"),
        ("secret.update", "hf-token"),
        ("secret.create", "a.first"),
    ]
    for answer in (created, replaced, listing):
        assert VALUE not in answer.text
    assert VALUE not in json.dumps(audit)

    # At rest: only a ciphertext, which does not carry the value.
    with session.begin():
        stored = session.scalar(
            select(ProjectSecret.ciphertext).where(ProjectSecret.key == "hf-token")
        )
    assert VALUE.encode() not in stored

    assert api.delete("/v1/projects/default/secrets/hf-token").status_code == 204
    again = api.delete("/v1/projects/default/secrets/hf-token")
    assert again.status_code == 404 and "no secret 'hf-token'" in again.json()["detail"]
    assert [s["key"] for s in api.get("/v1/projects/default/secrets").json()["items"]] == [
        "a.first"
    ]
    actions = [e["action"] for e in api.get("/v1/audit").json()["items"]]
    assert actions.count("secret.delete") == 1


@pytest.mark.parametrize(
    ("key", "body", "field"),
    [
        ("Has-Upper", {"value": "v"}, "key"),
        ("-dash-first", {"value": "v"}, "key"),
        ("k" * 129, {"value": "v"}, "key"),
        ("ok", {"value": ""}, "value"),
        ("ok", {"value": "x" * (MAX_VALUE_BYTES + 1)}, "value"),
        ("ok", {"value": "é" * (MAX_VALUE_BYTES // 2 + 1)}, "value"),  # over in bytes
        ("ok", {"value": 5}, "value"),
        ("ok", {}, "value"),
        ("ok", {"value": "v", "other": 1}, "other"),
    ],
)
def test_a_bad_key_or_value_is_422_naming_it_and_stores_nothing(api, session, key, body, field):
    response = api.put(f"/v1/projects/default/secrets/{key}", json=body)
    assert response.status_code == 422, response.text
    assert field in _fields(response), response.text
    with session.begin():
        assert session.scalar(select(ProjectSecret.id)) is None


def test_an_unknown_project_is_404(api):
    assert _put(api, "k", "v", project="nowhere").status_code == 404
    assert api.get("/v1/projects/nowhere/secrets").status_code == 404


def test_a_spec_naming_a_missing_secret_is_422_on_entrypoint_secrets(api, session):
    spec = small_spec("uses", 1, entrypoint={"command": ["true"], "secrets": {"HF_TOKEN": "hf"}})
    for path in ("/v1/jobs", "/v1/jobs/plan"):
        refused = api.post(path, json=spec)
        assert refused.status_code == 422, refused.text
        assert _fields(refused) == ["entrypoint.secrets"]
        assert "no secret 'hf'" in refused.json()["detail"]
    assert count_rows(session) == (0, 0)
    _put(api, "hf", VALUE)
    assert api.post("/v1/jobs/plan", json=spec).status_code == 200
    accepted = api.post("/v1/jobs", json=spec)
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["spec"]["entrypoint"]["secrets"] == {"HF_TOKEN": "hf"}
    assert VALUE not in accepted.text


@pytest.fixture
def live_attempt(api, session, settings):
    """A job of the default project using two secrets, its live attempt, and
    that attempt's token."""
    _put(api, "hf", VALUE)
    _put(api, "wandb.key", "w-value")
    spec = small_spec(
        gpus=1, entrypoint={"command": ["true"], "secrets": {"HF_TOKEN": "hf", "WB": "wandb.key"}}
    )
    job = make_job(session, status=JobStatus.RUNNING, spec=spec)
    attempt = make_attempt(session, job.id)
    token = attempt_token(TokenKey(settings.secret_key).get(session), attempt.id)
    return job.id, attempt.id, token


def _fetch(api, job_id, attempt_id, token):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return api.get(f"/v1/jobs/{job_id}/attempts/{attempt_id}/secrets", headers=headers)


def test_a_live_attempt_gets_its_secrets_with_its_token_only(api, session, live_attempt):
    job_id, attempt_id, token = live_attempt
    got = _fetch(api, job_id, attempt_id, token)
    assert got.status_code == 200, got.text
    assert got.json() == {"env": {"HF_TOKEN": VALUE, "WB": "w-value"}}
    assert got.headers["cache-control"] == "no-store"
    # No token, another attempt's token, or an API token: refused.
    assert _fetch(api, job_id, attempt_id, None).status_code == 401
    other = attempt_token(TokenKey(None).get(session), "0" * 26)
    assert _fetch(api, job_id, attempt_id, other).status_code == 401
    assert _fetch(api, "0" * 26, attempt_id, token).status_code == 404

    with session.begin():
        session.execute(
            update(JobAttempt).where(JobAttempt.id == attempt_id).values(status="FAILED")
        )
    ended = _fetch(api, job_id, attempt_id, token)
    assert ended.status_code == 409 and "has ended" in ended.json()["detail"]


def test_a_secret_deleted_before_launch_is_named_in_the_refusal(api, live_attempt):
    job_id, attempt_id, token = live_attempt
    api.delete("/v1/projects/default/secrets/wandb.key")
    refused = _fetch(api, job_id, attempt_id, token)
    assert refused.status_code == 409
    assert "no secret 'wandb.key' any more" in refused.json()["detail"]
    assert VALUE not in refused.text


def test_values_never_show_in_the_audit_trail_or_events(api, session, live_attempt):
    job_id, _, _ = live_attempt
    with session.begin():
        details = [json.dumps(e.detail) for e in session.scalars(select(AuditEvent))]
    assert details and not any(VALUE in d for d in details)
    assert VALUE not in api.get(f"/v1/jobs/{job_id}").text
    assert VALUE not in api.get(f"/v1/jobs/{job_id}/events").text
