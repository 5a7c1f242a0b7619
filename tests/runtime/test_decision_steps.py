"""A sweep's trial reports its decision steps at once and waits for the answer:
the reporter alone, and trainplane.script's report/should_stop, against a
real HTTP server on 127.0.0.1 that prunes at step 10 (the whole path to the
real API runs in tests/runtime/test_sweep_pruning.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from trainplane import script
from trainplane.runtime import env as tp_env
from trainplane.runtime.reporting import ProgressReporter, decision_steps_of

pytestmark = pytest.mark.ray_free

PRUNE_AT = 10


class Judge:
    """Answers 200; asks for a stop once a report reaches PRUNE_AT. Holds each
    answer until ``release`` is set, to show the reporter waits for it."""

    def __init__(self) -> None:
        self.steps: list[list[int]] = []  # the points' steps of each report
        self.release = threading.Event()
        self.release.set()


@pytest.fixture
def judge() -> Iterator[tuple[str, Judge]]:
    state = Judge()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            steps = [p["step"] for p in body.get("points", [])]
            state.steps.append(steps)
            state.release.wait(30)
            stop = None
            if steps and max(steps) >= PRUNE_AT:
                stop = {"reason": "pruned", "requested_at": datetime.now(UTC).isoformat()}
            answer = json.dumps({"stop": stop}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        state.release.set()
        server.shutdown()


def test_a_decision_step_is_sent_at_once_and_its_answer_known_on_return(judge) -> None:
    url, state = judge
    heard: list[str] = []
    sender = ProgressReporter(
        url=url,
        job_id="job1",
        attempt_id="att1",
        token="secret",
        send_every=600,  # left alone it would not send during the test
        on_stop=heard.append,
        decision_steps=[30, PRUNE_AT],
    )
    for step in range(1, PRUNE_AT):
        sender.record(step, {"loss": 1.0}, total_steps=None)
    assert sender.stop_reason is None
    sender.record(PRUNE_AT, {"loss": 0.5}, total_steps=None)
    # Returned only once answered: the stop is known before the next step.
    assert sender.stop_reason == "pruned" and heard == ["pruned"]
    assert state.steps == [list(range(1, PRUNE_AT + 1))]  # one report, up to the step
    assert sender.decision_steps == [30]
    sender.close(timeout=5)


def test_no_answer_in_time_and_training_goes_on(judge) -> None:
    url, state = judge
    state.release.clear()  # the control plane hangs
    sender = ProgressReporter(
        url=url,
        job_id="job1",
        attempt_id="att1",
        token="secret",
        send_every=600,
        decision_steps=[PRUNE_AT],
        decision_wait=0.2,
    )
    sender.record(PRUNE_AT, {"loss": 0.5}, total_steps=None)
    assert sender.stop_reason is None  # it did not wait for the answer
    assert sender.decision_steps == []
    state.release.set()
    sender.close(timeout=5)
    assert sender.stop_reason == "pruned"  # heard later, as any stop


def test_script_report_at_a_decision_step_makes_should_stop_true_at_once(
    judge, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url, _ = judge
    monkeypatch.setattr(script, "_current", None)
    monkeypatch.chdir(tmp_path)
    for name, value in {
        tp_env.CONTROL_PLANE_URL: url,
        tp_env.JOB_ID: "job1",
        tp_env.ATTEMPT_ID: "att1",
        tp_env.ATTEMPT_TOKEN: "secret",
        tp_env.DECISION_STEPS: f"{PRUNE_AT},30,90",
        "RANK": "0",
    }.items():
        monkeypatch.setenv(name, value)
    for name in (tp_env.SYNC_DIR, tp_env.CHECKPOINT_URI, tp_env.METRICS_FILE):
        monkeypatch.delenv(name, raising=False)
    script.report({"loss": 1.0}, PRUNE_AT - 1)
    assert not script.should_stop()
    script.report({"loss": 0.9}, PRUNE_AT)
    assert script.should_stop()
    # The save that follows says why, for the driver and the checkpoint list.
    assert script._session().stopping == "pruned"
    script._session().reporter.close(5)


def test_decision_steps_from_the_environment() -> None:
    assert decision_steps_of({tp_env.DECISION_STEPS: "10,30,90"}) == [10, 30, 90]
    assert decision_steps_of({}) == []
    assert decision_steps_of({tp_env.DECISION_STEPS: "ten"}) == []
