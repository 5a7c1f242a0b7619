"""A cluster that stops answering: its attempts are lost after the timeout and
their jobs retried (or failed), never left RUNNING."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.factories import small_spec
from tests.scheduler.conftest import register_local, wait_for
from trainplane.backends.local_ray import LocalRayHead
from trainplane.serve.processes import running_scheduler
from trainplane.testing.processes import attempt_processes

pytestmark = pytest.mark.postgres_only


@pytest.fixture
def doomed_head(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    state = Path(tempfile.mkdtemp(prefix="tp-ray-", dir="/tmp"))
    head = LocalRayHead(state, slots=1).start()
    yield head
    head.stop()
    shutil.rmtree(state, ignore_errors=True)


def test_a_lost_cluster_fails_over_to_the_queue(api, fast_settings, db_url, doomed_head):
    register_local(db_url, doomed_head.address, name="doomed", slots=1)
    spec = small_spec(
        "survivor",
        gpus=1,
        retries={"max_restarts": 1, "backoff_seconds": 0},
        entrypoint={"command": ["python", "-c", "import time; time.sleep(600)"]},
    )
    with running_scheduler(fast_settings):
        job_id = api.post("/v1/jobs", json=spec).json()["id"]
        wait_for(lambda: api.get(f"/v1/jobs/{job_id}").json()["status"] == "RUNNING", 60, "RUNNING")
        doomed_head.stop()  # the whole cluster goes away
        job = wait_for(
            lambda: (
                (j := api.get(f"/v1/jobs/{job_id}").json())["status"] == "QUEUED"
                and "unreachable" in j["reason"]
                and j
            ),
            60,
            "the job back in the queue, waiting for the cluster",
        )
    first = job["attempts"][0]
    # Its driver does not train on, unseen, where the head was.
    wait_for(
        lambda: not attempt_processes(first["id"], "trainplane.runtime.driver"),
        10,
        "the lost attempt's driver to exit",
    )
    assert first["status"] == "LOST"
    assert "doomed stopped answering" in first["reason"]
    history = [e["to_status"] for e in api.get(f"/v1/jobs/{job_id}/events").json()["items"]]
    assert history[-3:] == ["RUNNING", "RESTARTING", "QUEUED"]
    assert job["reason"] == "waiting for 1 GPU: doomed is unreachable"
