"""What fuzzing the API (and probing around what it found) turned up, pinned.

Each request below was a 500 on PostgreSQL, a 400 the OpenAPI document did
not declare, or (NaN in args) stored silently as null; each must now be a
4xx problem naming the field at fault, on the same live server the fuzzer
calls. And the document must declare the answers every route can give: 401
and 403 where a token is needed, 413 where a body is read.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.factories import small_spec
from tests.fuzz.live_server import AUTH

BIGINT_PAST = 2**63
JSON = {"content-type": "application/json"}
# A spec as raw JSON text: Python's parser takes NaN and Infinity, which
# strict JSON (and so JSONB) has no spelling for.
SPEC_WITH = '{{"kind": "train", "name": "raw", "entrypoint": {{"command": ["x"]{entry}}}{rest}}}'


def _cursor(*parts: str) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode().rstrip("=")


def _chunked_yaml(total: int) -> Iterator[bytes]:
    line = b"a: " + b"x" * 65_533 + b"\n"
    for _ in range(total // len(line) + 1):
        yield line


def finding(
    what: str, method: str, path: str, status: int, field: str | None, **request: Any
) -> Any:
    """One request that was wrong (``what``), and the answer it must get now."""
    return pytest.param(method, path, request, status, field, id=what)


def posted_as_text(what: str, path: str, field: str, text: str | bytes) -> Any:
    """A body JSON's parser gets as it is, for what a JSON encoder would not write."""
    return finding(what, "POST", path, 422, field, content=text, headers=JSON)


NUL = "\x00"
FINDINGS = [
    finding(
        "event id past BIGINT", "GET", f"/v1/jobs/{{job}}/events?after={BIGINT_PAST}", 422, "after"
    ),
    finding("audit id past BIGINT", "GET", f"/v1/audit?after={BIGINT_PAST}", 422, "after"),
    finding(
        "until past 9999 in UTC", "GET", "/v1/usage?until=9999-12-31T23:59:59-05:00", 422, "until"
    ),
    finding("until at year 1", "GET", "/v1/usage?until=0001-01-01T00:00:00", 422, "until"),
    finding("NUL in a path id", "GET", "/v1/jobs/%00", 422, "job_id"),
    finding("NUL in a query", "GET", "/v1/jobs/compare?ids=a%00,b", 422, "ids"),
    finding(
        "NUL in a cursor",
        "GET",
        f"/v1/jobs?cursor={_cursor('2020-01-01T00:00:00+00:00', NUL)}",
        422,
        "cursor",
    ),
    finding(
        "NUL in a spec",
        "POST",
        "/v1/jobs",
        422,
        "entrypoint.command[0]",
        json=small_spec(entrypoint={"command": [f"a{NUL}"]}),
    ),
    finding(
        "NUL in a key of a spec's args",
        "POST",
        "/v1/jobs",
        422,
        "entrypoint.args",
        json=small_spec(entrypoint={"command": ["x"], "args": {NUL: 1}}),
    ),
    finding(
        "NUL in a description",
        "POST",
        "/v1/projects",
        422,
        "description",
        json={"name": "nul", "description": NUL},
    ),
    finding(
        "NUL in a label",
        "PUT",
        "/v1/clusters/nul",
        422,
        "labels.k",
        json={"name": "nul", "address": "http://127.0.0.1:9", "gpus": 1, "labels": {"k": NUL}},
    ),
    finding(
        "max_runtime past the INTEGER column",
        "POST",
        "/v1/jobs",
        422,
        "max_runtime",
        json=small_spec(max_runtime=2**31),
    ),
    posted_as_text(
        "Infinity in a number field",
        "/v1/jobs",
        "optimization.max_grad_norm",
        SPEC_WITH.format(entry="", rest=', "optimization": {"max_grad_norm": Infinity}'),
    ),
    posted_as_text(
        "NaN in args",
        "/v1/jobs",
        "entrypoint.args",
        SPEC_WITH.format(entry=', "args": {"lr": NaN}', rest=""),
    ),
    posted_as_text("a body that is not UTF-8", "/v1/projects", "body", b'{"name": "\xff"}'),
    posted_as_text("a body nested past the parser", "/v1/projects", "body", b"[" * 100_000),
    finding(
        "a chunked YAML body over the limit",
        "POST",
        "/v1/jobs",
        413,
        None,
        content=lambda: _chunked_yaml(2 << 20),
        headers={"content-type": "application/yaml"},
    ),
]


@pytest.fixture(scope="module")
def job(server_url: str) -> str:
    response = httpx.post(
        f"{server_url}/v1/jobs", json=small_spec("findings"), headers=AUTH, timeout=30
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


@pytest.mark.parametrize(("method", "path", "arguments", "status", "field"), FINDINGS)
def test_a_request_that_was_a_500_is_a_problem_naming_the_field(
    server_url: str,
    job: str,
    method: str,
    path: str,
    arguments: dict[str, Any],
    status: int,
    field: str | None,
) -> None:
    arguments = dict(arguments)  # shared by reruns: leave the table as it is
    headers = {**AUTH, **arguments.pop("headers", {})}
    if callable(arguments.get("content")):  # a stream, made afresh for each run
        arguments["content"] = arguments["content"]()
    url = server_url + path.replace("{job}", job)
    response = httpx.request(method, url, headers=headers, timeout=30, **arguments)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    if field is not None:
        assert [e["field"] for e in response.json()["errors"]] == [field], response.text


@pytest.fixture(scope="module")
def document(server_url: str) -> dict[str, Any]:
    return httpx.get(f"{server_url}/openapi.json", timeout=10).json()


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            yield f"{method.upper()} {path}", operation


def test_every_route_that_needs_a_token_declares_401_and_403(document: dict[str, Any]) -> None:
    secured = {label: op for label, op in _operations(document) if op.get("security")}
    assert len(secured) > 20
    for label, operation in secured.items():
        assert {"401", "403"} <= set(operation["responses"]), label


def test_every_route_that_reads_a_body_declares_413(document: dict[str, Any]) -> None:
    with_body = {label: op for label, op in _operations(document) if "requestBody" in op}
    assert len(with_body) >= 8
    for label, operation in with_body.items():
        assert "413" in operation["responses"], label


def test_a_projects_weight_is_documented_as_the_number_it_must_be(
    document: dict[str, Any],
) -> None:
    # null was documented as allowed, and is refused (422).
    weight = document["components"]["schemas"]["ProjectUpdate"]["properties"]["weight"]
    assert weight["type"] == "number" and "anyOf" not in weight and "default" not in weight
