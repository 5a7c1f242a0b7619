"""Requests are authenticated before their body is read, and a body that is
read stays within limits: YAML nesting and size, JSON nesting.

On an installation with tokens, an anonymous or wrong credential gets its 401
whatever the body holds: a body that would be a 422 when parsed (broken YAML,
broken JSON, YAML nested beyond the recursion limit) proves it was not.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from tests.factories import count_rows, small_spec
from trainplane.api.app import create_app
from trainplane.api.yaml_bodies import MAX_YAML_DEPTH, MAX_YAML_NODES

ROOT = "a-bootstrap-token-for-auth-tests"
AUTH = {"Authorization": f"Bearer {ROOT}"}
YAML = {"content-type": "application/yaml"}
JSON = {"content-type": "application/json"}
# Each of these is a 422 once parsed; a 401 for it means it was never parsed.
UNPARSABLE = [
    ("broken yaml", "kind: [train\n", YAML),
    ("yaml nested past Python's recursion limit", "[" * 200_000, YAML),
    ("broken json", '{"kind": "train"', JSON),
    ("json nested past Python's recursion limit", "[" * 200_000, JSON),
]


@pytest.fixture
def secured(settings):
    app = create_app(settings.model_copy(update={"bootstrap_token": SecretStr(ROOT)}))
    with TestClient(app) as client:
        yield client


@pytest.mark.parametrize(("label", "body", "headers"), UNPARSABLE, ids=[u[0] for u in UNPARSABLE])
@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/jobs/plan"])
@pytest.mark.parametrize("token", [None, "tp_not-a-token"], ids=["anonymous", "unknown"])
def test_a_body_is_not_read_before_its_caller_is_known(secured, label, body, headers, path, token):
    if token:
        headers = {**headers, "Authorization": f"Bearer {token}"}
    refused = secured.post(path, content=body, headers=headers)
    assert refused.status_code == 401, (label, refused.text[:300])
    assert refused.headers["www-authenticate"] == "Bearer"
    assert "errors" not in refused.json()  # nothing about the body: it was never read


@pytest.mark.parametrize(("label", "body", "headers"), UNPARSABLE, ids=[u[0] for u in UNPARSABLE])
def test_the_same_bodies_from_a_known_caller_are_a_422_on_the_body(secured, label, body, headers):
    answer = secured.post("/v1/jobs", content=body, headers={**headers, **AUTH})
    assert answer.status_code == 422, (label, answer.text[:300])
    assert answer.json()["errors"][0]["field"] == "body"


def nested_yaml(depth: int) -> str:
    """A spec whose deepest node is ``depth`` levels down: the document's
    mapping, tracking's, tags', then lists down to a scalar."""
    value = "[" * (depth - 4) + "1" + "]" * (depth - 4)
    return f"kind: train\nname: deep\ntracking:\n  tags:\n    x: {value}\n"


def test_yaml_nested_deeper_than_the_limit_is_a_422_naming_it(secured, session):
    # Exactly at the limit it parses (the spec is then refused for what it
    # says, not for its shape).
    at_limit = secured.post(
        "/v1/jobs", content=nested_yaml(MAX_YAML_DEPTH), headers={**YAML, **AUTH}
    )
    assert at_limit.status_code == 422
    assert at_limit.json()["errors"][0]["field"] != "body", at_limit.text[:300]
    over = secured.post(
        "/v1/jobs", content=nested_yaml(MAX_YAML_DEPTH + 1), headers={**YAML, **AUTH}
    )
    assert over.status_code == 422, over.text[:300]
    error = over.json()["errors"][0]
    assert error["field"] == "body" and f"limit is a depth of {MAX_YAML_DEPTH}" in error["message"]
    assert count_rows(session) == (0, 0)


def test_yaml_with_more_nodes_than_the_limit_is_a_422_naming_it(secured, session):
    # The shape of the report: a 700 KB list an anonymous client once posted.
    big = "x:\n" + "  - 1\n" * MAX_YAML_NODES
    answer = secured.post("/v1/jobs/plan", content=big, headers={**YAML, **AUTH})
    assert answer.status_code == 422, answer.text[:300]
    error = answer.json()["errors"][0]
    assert error["field"] == "body" and f"limit is {MAX_YAML_NODES} nodes" in error["message"]
    assert count_rows(session) == (0, 0)


def test_a_known_callers_yaml_spec_still_goes_through(secured):
    spec = "kind: train\nname: fine\nentrypoint: {command: [python, -c, 'print(1)']}\n"
    created = secured.post(
        "/v1/jobs", content=spec + "resources: {gpus: 1}\n", headers={**YAML, **AUTH}
    )
    assert created.status_code == 201, created.text
    assert created.json()["submitted_by"] == "bootstrap"


def test_routes_get_the_caller_the_middleware_found(secured):
    """The caller a route sees is the one authenticated before the body:
    a project token is refused a project it has no role in."""
    token = secured.post(
        "/v1/tokens", json={"name": "v", "project": "default", "role": "viewer"}, headers=AUTH
    ).json()["token"]
    viewer = {"Authorization": f"Bearer {token}"}
    assert secured.get("/v1/whoami", headers=viewer).json()["subject"] == "v"
    refused = secured.post("/v1/jobs", json=small_spec("v-job", 1), headers=viewer)
    assert refused.status_code == 403 and "viewer" in refused.json()["detail"]


def test_the_runtimes_routes_are_left_to_their_attempt_token(secured):
    # No API token, yet not the API-token 401: the route's own check answers.
    answer = secured.post("/v1/jobs/j/attempts/a/progress", json={})
    assert answer.status_code == 401
    assert "attempt" in answer.json()["detail"]
