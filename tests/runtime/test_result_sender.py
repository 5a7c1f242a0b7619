"""How a rank's result reaches the control plane when the control plane
misbehaves, against a real HTTP server on 127.0.0.1 that answers with a
chosen status (the happy path runs end to end in tests/sdk)."""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.runtime.conftest import control_plane_at
from tests.runtime.test_result_tensors import on_gpu
from trainplane.jobs.results import MAX_RESULT_BYTES
from trainplane.net import free_port
from trainplane.runtime import env as tp_env
from trainplane.runtime import results
from trainplane.runtime.results import ResultNotDelivered, ResultSender

pytestmark = pytest.mark.ray_free


class ControlPlane:
    """Answers every PUT with ``status``; keeps each body."""

    def __init__(self) -> None:
        self.status = 200
        self.puts = 0
        self.bodies: list[dict[str, Any]] = []
        plane = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                plane.puts += 1
                plane.bodies.append(
                    json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                )
                self.send_response(plane.status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"no")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture
def plane(monkeypatch: pytest.MonkeyPatch) -> Iterator[ControlPlane]:
    plane = ControlPlane()
    monkeypatch.setattr(results, "BACKOFF_SECONDS", 0.01)
    with control_plane_at(plane.server, monkeypatch):
        yield plane


def test_a_delivered_result_is_one_request(plane: ControlPlane) -> None:
    ResultSender(required=True).returned(0, {"loss": 0.5})
    assert plane.puts == 1


def test_a_failing_control_plane_is_tried_a_bounded_number_of_times(plane: ControlPlane) -> None:
    plane.status = 503
    with pytest.raises(ResultNotDelivered, match="answered 503"):
        ResultSender(required=True).returned(0, 1.0)
    assert plane.puts == results.TRIES


def test_a_refusal_is_not_asked_again(plane: ControlPlane) -> None:
    plane.status = 409
    with pytest.raises(ResultNotDelivered, match="answered 409"):
        ResultSender(required=True).returned(0, 1.0)
    assert plane.puts == 1


def test_an_unreachable_control_plane_fails_a_required_result(
    monkeypatch: pytest.MonkeyPatch, plane: ControlPlane
) -> None:
    monkeypatch.setenv(tp_env.CONTROL_PLANE_URL, f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ResultNotDelivered, match="did not answer"):
        ResultSender(required=True).returned(0, 1.0)


def test_a_courtesy_result_that_cannot_be_delivered_is_only_printed(
    plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    plane.status = 503
    ResultSender(required=False).returned(0, 1.0)
    assert "the result was not recorded" in capsys.readouterr().out


def test_a_return_value_too_large_to_record_says_to_use_storage(plane: ControlPlane) -> None:
    with pytest.raises(ResultNotDelivered, match="write it to storage"):
        ResultSender(required=True).returned(0, b"x" * (MAX_RESULT_BYTES + 1))
    assert plane.puts == 0


def test_an_exception_is_reported_even_when_it_cannot_be_delivered(
    plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    plane.status = 500
    ResultSender(required=True).raised(1, ValueError("odd"))  # never raises over the error
    assert plane.puts == results.TRIES
    assert "answered 500" in capsys.readouterr().out


def test_a_result_holding_a_gpu_tensor_is_recorded_in_a_form_a_cpu_machine_reads(
    plane: ControlPlane,
) -> None:
    ResultSender(required=True).returned(0, {"loss": on_gpu([0.125])})
    (body,) = plane.bodies
    value = pickle.loads(base64.b64decode(body["value"]))
    assert value["loss"].device.type == "cpu" and value["loss"].tolist() == [0.125]
