"""A Ray head killed with SIGKILL under a running job: its attempt is lost
(with the reason), the job waits in the queue for the cluster, and runs again
when the head is back; with no restart left it fails. Never RUNNING forever."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.factories import small_spec
from tests.scheduler.conftest import register_local, wait_for
from trainplane.backends.local_ray import LocalRayHead
from trainplane.serve.processes import running_scheduler
from trainplane.testing.processes import attempt_processes
from trainplane.testing.ray_nodes import kill_session

pytestmark = pytest.mark.postgres_only


@pytest.fixture
def doomed_head(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[LocalRayHead]:
    monkeypatch.setenv("HOME", str(tmp_path))
    state = Path(tempfile.mkdtemp(prefix="tp-ray-", dir="/tmp"))
    head = LocalRayHead(state, slots=1).start()
    yield head
    head.stop()
    shutil.rmtree(state, ignore_errors=True)


def kill_head(head: LocalRayHead) -> None:
    """Every process of the head at once, Ray's workers included."""
    assert head.process is not None
    kill_session(head.process.pid)
    head.process.wait()
    head.process = None


def once_then_quick(marker: Path) -> dict:
    """A command that hangs the first time it runs and succeeds the next."""
    code = (
        "import pathlib, time\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if not marker.exists():\n"
        "    marker.touch()\n"
        "    time.sleep(600)\n"
        "print('second run')\n"
    )
    return {"command": ["python", "-c", code]}


def test_a_killed_head_loses_the_attempt_and_the_job_runs_again_when_it_is_back(
    api, fast_settings, db_url, doomed_head, tmp_path
):
    register_local(db_url, doomed_head.address, name="doomed", slots=1)
    marker = tmp_path / "ran-once"
    spec = small_spec(
        "survivor",
        gpus=1,
        retries={"max_restarts": 1, "backoff_seconds": 0},
        entrypoint=once_then_quick(marker),
    )
    with running_scheduler(fast_settings):
        job_id = api.post("/v1/jobs", json=spec).json()["id"]
        wait_for(lambda: api.get(f"/v1/jobs/{job_id}").json()["status"] == "RUNNING", 60, "RUNNING")
        # RUNNING is Ray's word for the attempt's driver; the command itself
        # starts a moment later. Killed before it ran, the second run would
        # take the first one's place and hang.
        wait_for(marker.exists, 60, "the first run to start")
        kill_head(doomed_head)
        job = wait_for(
            lambda: (
                (j := api.get(f"/v1/jobs/{job_id}").json())["status"] == "QUEUED"
                and "unreachable" in j["reason"]
                and j
            ),
            60,
            "the job back in the queue, waiting for the cluster",
        )
        assert job["reason"] == "waiting for 1 GPU: doomed is unreachable"
        first = job["attempts"][0]
        assert first["status"] == "LOST"
        assert "doomed stopped answering" in first["reason"]
        # Its driver does not train on, unseen, where the head was.
        wait_for(
            lambda: not attempt_processes(first["id"], "trainplane.runtime.driver"),
            10,
            "the lost attempt's driver to exit",
        )
        doomed_head.start()  # the same addresses, a new Ray cluster
        job = wait_for(
            lambda: (j := api.get(f"/v1/jobs/{job_id}").json())["terminal"] and j,
            120,
            "the job to end on the restarted head",
        )
    assert job["status"] == "SUCCEEDED", job["reason"]
    assert [a["status"] for a in job["attempts"]] == ["LOST", "SUCCEEDED"]
    logs = api.get(f"/v1/jobs/{job_id}/logs", params={"attempt": 2}).text
    assert "second run" in logs
    history = [e["to_status"] for e in api.get(f"/v1/jobs/{job_id}/events").json()["items"]]
    # The second run is quick: it may end before the scheduler saw it RUNNING.
    assert history[-6:] in (
        ["RUNNING", "RESTARTING", "QUEUED", "STARTING", "RUNNING", "SUCCEEDED"],
        ["STARTING", "RUNNING", "RESTARTING", "QUEUED", "STARTING", "SUCCEEDED"],
    ), history


def test_a_killed_head_fails_a_job_with_no_restart_left(api, fast_settings, db_url, doomed_head):
    register_local(db_url, doomed_head.address, name="doomed", slots=1)
    spec = small_spec(
        "last-chance",
        gpus=1,
        retries={"max_restarts": 0},
        entrypoint={"command": ["python", "-c", "import time; time.sleep(600)"]},
    )
    with running_scheduler(fast_settings):
        job_id = api.post("/v1/jobs", json=spec).json()["id"]
        wait_for(lambda: api.get(f"/v1/jobs/{job_id}").json()["status"] == "RUNNING", 60, "RUNNING")
        kill_head(doomed_head)
        job = wait_for(
            lambda: (j := api.get(f"/v1/jobs/{job_id}").json())["terminal"] and j,
            60,
            "the job to fail",
        )
    assert job["status"] == "FAILED"
    assert "doomed stopped answering" in job["reason"], job["reason"]
    assert [a["status"] for a in job["attempts"]] == ["LOST"]
