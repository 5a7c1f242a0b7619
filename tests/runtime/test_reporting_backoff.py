"""The progress reporter against a control plane that rate-limits it: a 429
makes it wait the Retry-After it was given, keep its points and send them
after; the run is never failed or cut off for it. A real HTTP endpoint that
answers 429 a few times, as the API does past a burst."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trainplane.runtime.reporting import ProgressReporter

pytestmark = pytest.mark.ray_free

RETRY_AFTER = 1


class Limiter:
    """Answers 429 to the first ``refusals`` posts, then 200."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.posts: list[tuple[float, int, dict]] = []  # when, answer, body


@pytest.fixture
def limited() -> Iterator[tuple[str, Limiter]]:
    limiter = Limiter(refusals=2)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status = 429 if len(limiter.posts) < limiter.refusals else 200
            limiter.posts.append((time.monotonic(), status, body))
            payload = b'{"stop": null}' if status == 200 else b'{"detail": "slow down"}'
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", str(RETRY_AFTER))
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", limiter
    finally:
        server.shutdown()


def test_a_429_is_waited_out_and_no_point_is_lost(limited):
    url, limiter = limited
    sender = ProgressReporter(
        url=url, job_id="job1", attempt_id="att1", token="secret", send_every=0.05
    )
    for step in range(1, 6):
        sender.record(step, {"loss": 1.0 / step}, total_steps=5)
    deadline = time.monotonic() + 3 * RETRY_AFTER + 5
    while not any(status == 200 for _, status, _ in limiter.posts):
        assert time.monotonic() < deadline, limiter.posts
        time.sleep(0.05)
    sender.close()

    statuses = [status for _, status, _ in limiter.posts]
    assert statuses[:3] == [429, 429, 200]
    times = [when for when, _, _ in limiter.posts]
    # Each retry came only after the Retry-After it was given (not every 0.05 s).
    assert times[1] - times[0] >= RETRY_AFTER * 0.95 and times[2] - times[1] >= RETRY_AFTER * 0.95
    delivered = [
        p["step"] for _, status, body in limiter.posts if status == 200 for p in body["points"]
    ]
    assert delivered == [1, 2, 3, 4, 5]
    assert not sender.revoked  # still reporting: a 429 is no reason to stop
