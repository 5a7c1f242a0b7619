"""The progress reporter's sending rules, against a recording HTTP endpoint
(the whole path to the real API runs in test_training)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trainplane.runtime.reporting import ProgressReporter

pytestmark = pytest.mark.ray_free


class Recorder:
    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.headers: list[str | None] = []
        self.answer = 204


@pytest.fixture
def endpoint() -> Iterator[tuple[str, Recorder]]:
    recorder = Recorder()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            recorder.bodies.append(json.loads(self.rfile.read(length)))
            recorder.headers.append(self.headers.get("Authorization"))
            self.send_response(recorder.answer)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", recorder
    finally:
        server.shutdown()


def reporter(url: str, send_every: float = 0.05) -> ProgressReporter:
    return ProgressReporter(
        url=url, job_id="job1", attempt_id="att1", token="secret", send_every=send_every
    )


def test_points_arrive_in_order_batched_with_the_token(endpoint) -> None:
    url, recorder = endpoint
    sender = reporter(url, send_every=0.3)
    for step in range(1, 101):
        sender.record(step, {"loss": 1.0 / step, "bad": float("nan")}, total_steps=100)
    sender.close()
    points = [p for body in recorder.bodies for p in body["points"]]
    assert [p["step"] for p in points] == list(range(1, 101))
    assert all(set(p["metrics"]) == {"loss"} for p in points)  # NaN is not sent
    assert len(recorder.bodies) < 10  # batched, not one request a point
    assert recorder.bodies[-1]["step"] == 100 and recorder.bodies[-1]["total_steps"] == 100
    assert set(recorder.headers) == {"Bearer secret"}


def test_a_conflict_stops_the_reporter(endpoint) -> None:
    url, recorder = endpoint
    recorder.answer = 409  # the control plane says the attempt is over
    sender = reporter(url)
    sender.record(1, {"loss": 1.0}, total_steps=None)
    deadline = time.monotonic() + 5
    while not sender.revoked and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sender.revoked
    sent = len(recorder.bodies)
    sender.record(2, {"loss": 0.5}, total_steps=None)
    time.sleep(0.3)
    sender.close()
    assert len(recorder.bodies) == sent


def test_without_a_control_plane_points_go_to_the_metrics_file(tmp_path) -> None:
    path = tmp_path / "metrics.jsonl"
    sender = ProgressReporter(
        url=None, job_id=None, attempt_id=None, token=None, metrics_file=str(path)
    )
    sender.record(3, {"loss": 0.25}, total_steps=None)
    sender.close()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [3]


def test_flush_sends_what_is_queued_now(endpoint) -> None:
    url, recorder = endpoint
    sender = reporter(url, send_every=60)  # left alone, it would not send for a minute
    sender.record(7, {"loss": 0.5}, total_steps=None)
    sender.flush(timeout=5)
    assert [p["step"] for body in recorder.bodies for p in body["points"]] == [7]
    sender.close(timeout=1)
