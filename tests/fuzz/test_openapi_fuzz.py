"""Every operation of ``/openapi.json``, fuzzed by schemathesis against a real
``trainplane server`` process on a real PostgreSQL, authenticated with the
bootstrap admin token.

Each response must be a non-5xx whose status code, content type and body are
the ones the document declares for that operation. Path parameters are drawn
both from generated values and from objects seeded through the API first (a
project, jobs, a cluster, tokens), and schemathesis also reuses ids from
earlier responses, so the operations run on things that exist too. The
server runs without its scheduler: nothing is ever placed on a cluster.

The run is bounded and reproducible (a fixed seed, deterministic generation,
a few examples per operation) so that it takes about a minute on a small CI
machine and fails the same way twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import schemathesis
import schemathesis.engine
from hypothesis import strategies as st
from schemathesis.engine import Status, StopReason, events
from schemathesis.engine.recorder import ScenarioRecorder

from tests.factories import small_spec
from tests.fuzz.live_server import AUTH

SEED = 20240601
EXAMPLES_PER_OPERATION = 25
REQUEST_TIMEOUT_SECONDS = 10
# What "answers as documented" means. schemathesis' other checks judge API
# design choices (say, that lax parsing takes until=0.5 as a unix time), not
# whether the document tells the truth.
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
)
LOGS_PATH = "/v1/jobs/{job_id}/logs"
# Their coverage phase alone is over a thousand requests (the job spec has
# many fields); POST /v1/jobs/plan runs it on the same spec validator and
# checks, while POST /v1/jobs still gets the fuzzing phase.
NO_COVERAGE_PHASE = ({"path": "/v1/jobs", "method": "POST"},)


@schemathesis.serializer("application/zip")
def _zip_body(_: Any, value: Any) -> dict[str, Any]:
    """Code bundles are raw bytes; the fuzzer's are seldom zips (a 422)."""
    return {"data": value if isinstance(value, bytes) else str(value).encode()}


@dataclass(frozen=True)
class Seeded:
    """What the fuzzer finds in the database before it starts."""

    ids: dict[str, list[str]]  # path parameter name -> values that exist
    own_token_id: str  # the bootstrap token's, which the fuzzer must not revoke
    ended_job: str  # a cancelled job


@dataclass
class FuzzRun:
    """What one engine run saw: operations tested and problems found."""

    tested: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    stop_reason: StopReason | None = None


def _seed(url: str) -> Seeded:
    """Objects for path parameters to name, made the way a user makes them."""
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as client:

        def call(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
            response = client.request(method, path, **kwargs)
            assert response.status_code < 300, (method, path, response.text)
            return response.json()

        call("POST", "/v1/projects", json={"name": "fuzz", "description": "seeded"})
        call(
            "PUT",
            "/v1/clusters/fuzz-cluster",
            # Nothing listens on port 9, and no scheduler runs to probe it.
            json={"name": "fuzz-cluster", "address": "http://127.0.0.1:9", "gpus": 4},
        )
        jobs = [
            call("POST", "/v1/jobs", json=small_spec(f"fuzz-{n}", project=project))["id"]
            for n, project in enumerate(("fuzz", "fuzz", "default"))
        ]
        call("POST", f"/v1/jobs/{jobs[0]}/cancel")
        victims = [
            call("POST", "/v1/tokens", json={"name": f"victim-{n}", "role": "viewer"})["id"]
            for n in range(2)
        ]
        own = call("GET", "/v1/whoami")["token_id"]
    return Seeded(
        ids={"job_id": jobs, "name": ["fuzz", "default", "fuzz-cluster"], "token_id": victims},
        own_token_id=own,
        ended_job=jobs[0],
    )


def _follows(query: dict[str, Any] | None) -> bool:
    """Whether the server reads ``follow`` in ``query`` as true, as FastAPI
    parses booleans (a repeated parameter counts by its last value)."""
    value = (query or {}).get("follow")
    if isinstance(value, list):
        value = value[-1] if value else None
    return value is True or str(value).lower() in {"true", "1", "on", "yes", "t", "y"}


def _config(url: str) -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "seed": SEED,
            # Nothing carried over from earlier runs (.schemathesis/): each
            # starts from the seed alone.
            "cache": {"enabled": False},
            "base-url": url,
            "headers": AUTH,
            "request-timeout": REQUEST_TIMEOUT_SECONDS,
            "workers": 1,
            "generation": {
                "max-examples": EXAMPLES_PER_OPERATION,
                "deterministic": True,
                # The bootstrap token goes with every request (headers above);
                # random bearer secrets would only test the 401 path.
                "with-security-parameters": False,
            },
            "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
            # The stateful phase chains responses into requests without the
            # case filter below, so it revokes the fuzzer's own token (GET
            # /v1/whoami names it) and everything after is a 401.
            "phases": {"stateful": {"enabled": False}},
            "operations": [
                {
                    "include-path": operation["path"],
                    "include-method": operation["method"],
                    "phases": {"coverage": {"enabled": False}},
                }
                for operation in NO_COVERAGE_PHASE
            ],
        }
    )


def _schema(url: str, seeded: Seeded) -> Any:
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", config=_config(url))

    @schema.hook
    def before_generate_path_parameters(context: Any, strategy: Any) -> Any:
        # Also name objects that exist, so that operations get past their 404s.
        path = context.operation.path
        known = [
            {name: value}
            for name, values in seeded.ids.items()
            if path.count("{") == 1 and "{" + name + "}" in path
            for value in values
        ]
        return st.one_of(strategy, st.sampled_from(known)) if known else strategy

    @schema.hook
    def filter_case(context: Any, case: Any) -> bool:
        # Revoking the token the fuzzer calls with would turn every later
        # request into a 401, a documented answer: nothing more could fail.
        if (case.path_parameters or {}).get("token_id") == seeded.own_token_id:
            return False
        # follow=true streams until the job ends, and with no scheduler only
        # the cancelled one ever does: the request would run into the
        # timeout. Every other query of the logs operation is still fuzzed;
        # test_following_an_ended_jobs_log_ends_as_documented covers this one.
        return not (case.operation.path == LOGS_PATH and _follows(case.query))

    return schema


def _failures_of(recorder: ScenarioRecorder) -> list[str]:
    found = []
    for checks in recorder.checks.values():
        for check in checks:
            if check.status is Status.FAILURE and check.failure_info is not None:
                failure = check.failure_info.failure
                found.append(
                    f"{recorder.label}: {check.name}: {failure.title}\n{failure.message}\n"
                    f"{check.failure_info.code_sample}"
                )
    return found


def _fuzz(schema: Any) -> FuzzRun:
    """Every phase but the stateful one over every operation of ``schema``."""
    run = FuzzRun()
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            run.tested.add(event.recorder.label)
            run.problems += _failures_of(event.recorder)
            if event.status is Status.ERROR:
                run.problems.append(f"{event.recorder.label}: the scenario errored")
        elif isinstance(event, events.NonFatalError):
            run.problems.append(f"{event.label}: {event.info.format()}")
        elif isinstance(event, events.FatalError):
            run.problems.append(f"fatal: {event.exception!r}")
        elif isinstance(event, events.EngineFinished):
            run.stop_reason = event.stop_reason
    return run


@pytest.fixture(scope="module")
def seeded(server_url: str) -> Seeded:
    return _seed(server_url)


@pytest.fixture(scope="module")
def api_schema(server_url: str, seeded: Seeded) -> Any:
    return _schema(server_url, seeded)


def test_following_an_ended_jobs_log_ends_as_documented(api_schema: Any, seeded: Seeded) -> None:
    case = api_schema["/v1/jobs/{job_id}/logs"]["GET"].Case(
        path_parameters={"job_id": seeded.ended_job}, query={"follow": "true"}
    )
    response = case.call_and_validate(headers=AUTH, timeout=REQUEST_TIMEOUT_SECONDS)
    (content_type,) = response.headers["content-type"]
    assert content_type.startswith("text/event-stream")
    assert "event: end" in response.text and "CANCELLED" in response.text


def test_every_operation_answers_as_documented(
    server_url: str, seeded: Seeded, api_schema: Any
) -> None:
    document = httpx.get(f"{server_url}/openapi.json", timeout=10).json()
    declared = {
        f"{m.upper()} {p}" for p, operations in document["paths"].items() for m in operations
    }
    run = _fuzz(api_schema)
    assert run.stop_reason is StopReason.COMPLETED
    assert not run.problems, "\n\n".join(run.problems)
    assert run.tested == declared, "every operation of the document is fuzzed"
    # Had the token been revoked midway, every later answer would have been
    # a documented 401 and the run a pass that tested nothing.
    assert httpx.get(f"{server_url}/v1/whoami", headers=AUTH, timeout=10).status_code == 200
