"""How a runtime gets its attempt's secrets, against a real HTTP server on
127.0.0.1 that answers as told (the real control plane answers in
tests/api/test_secrets_api.py, and a whole run in tests/scheduler), and how
an attempt naming secrets is launched: never with their values."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.factories import small_spec
from tests.runtime.conftest import control_plane_at
from trainplane.jobs.spec import parse_spec
from trainplane.runtime import env as tp_env
from trainplane.runtime import secrets
from trainplane.runtime.secrets import SecretsUnavailable, secret_env
from trainplane.scheduler.launch import LaunchError, launch_request

pytestmark = pytest.mark.ray_free

SPEC = parse_spec(small_spec(entrypoint={"command": ["true"], "secrets": {"HF_TOKEN": "hf"}}))


class ControlPlane:
    """Answers each GET with the next (status, body) of ``answers``, the last
    one for good; remembers the paths and tokens it was asked with."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict]] = [(200, {"env": {"HF_TOKEN": "v"}})]
        self.asked: list[tuple[str, str]] = []
        plane = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                plane.asked.append((self.path, self.headers.get("Authorization", "")))
                status, body = plane.answers.pop(0) if len(plane.answers) > 1 else plane.answers[0]
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture
def plane(monkeypatch: pytest.MonkeyPatch) -> Iterator[ControlPlane]:
    plane = ControlPlane()
    monkeypatch.setattr(secrets, "FIRST_WAIT_SECONDS", 0.01)
    with control_plane_at(plane.server, monkeypatch):
        yield plane


def test_the_values_are_asked_for_with_the_attempt_token(plane):
    assert secret_env(SPEC) == {"HF_TOKEN": "v"}
    assert plane.asked == [("/v1/jobs/job/attempts/attempt/secrets", "Bearer token")]


def test_a_spec_without_secrets_asks_nothing(plane):
    assert secret_env(parse_spec(small_spec())) == {}
    assert plane.asked == []


def test_a_refusal_is_reported_with_the_control_planes_reason(plane):
    detail = "entrypoint.secrets: project p has no secret 'hf' any more"
    plane.answers = [(409, {"detail": detail})]
    with pytest.raises(SecretsUnavailable, match="no secret 'hf' any more"):
        secret_env(SPEC)
    assert len(plane.asked) == 1  # a refusal is not retried


def test_an_unavailable_control_plane_is_retried_then_given_up_on(plane):
    plane.answers = [(503, {}), (502, {}), (200, {"env": {"HF_TOKEN": "v"}})]
    assert secret_env(SPEC) == {"HF_TOKEN": "v"}
    plane.answers = [(503, {})]
    plane.asked.clear()
    with pytest.raises(SecretsUnavailable, match="after 5 tries"):
        secret_env(SPEC)
    assert len(plane.asked) == secrets.TRIES


def test_an_answer_missing_a_variable_is_refused(plane):
    plane.answers = [(200, {"env": {}})]
    with pytest.raises(SecretsUnavailable, match="no value for HF_TOKEN"):
        secret_env(SPEC)


def test_without_a_control_plane_the_attempt_cannot_have_secrets(monkeypatch):
    monkeypatch.delenv(tp_env.CONTROL_PLANE_URL, raising=False)
    with pytest.raises(SecretsUnavailable, match="TRAINPLANE_ADVERTISE_URL"):
        secret_env(SPEC, environ={})


def _launch(spec, control_plane_url):
    return launch_request(
        job_id="job-1",
        attempt_id="attempt-1",
        restarts_used=0,
        spec=spec,
        accelerator="cpu",
        control_plane_url=control_plane_url,
        attempt_token="t" * 64,
        checkpoint_dir="/ckpt/c",
        model_dir="/ckpt/m",
    )


def test_an_attempt_with_secrets_is_launched_with_their_keys_only():
    spec = parse_spec(
        small_spec(entrypoint={"command": ["true"], "secrets": {"HF_TOKEN": "hf-token"}})
    )
    env_vars = _launch(spec, "http://tp:8080").runtime_env["env_vars"]
    assert "HF_TOKEN" not in env_vars  # the runtime fetches the value itself
    with pytest.raises(LaunchError, match="TRAINPLANE_ADVERTISE_URL"):
        _launch(spec, None)
