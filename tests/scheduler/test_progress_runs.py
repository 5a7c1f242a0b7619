"""Progress reports from a real run: a job on the local Ray cluster posts its
step with its attempt token to a real API server, then hangs; the scheduler
stops it as stuck and restarts it, until no restart is left."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.factories import small_spec
from tests.scheduler.conftest import api_on_a_port, register_local, wait_for
from trainplane.backends.local_ray import LocalRayHead
from trainplane.config import Settings
from trainplane.serve.processes import running_scheduler

# Reports step 40 once, says what it was launched with, then hangs.
REPORT_THEN_HANG = """
import json, os, time, urllib.request
e = os.environ
job, attempt = e["TRAINPLANE_JOB_ID"], e["TRAINPLANE_ATTEMPT_ID"]
url = f"{e['TRAINPLANE_URL']}/v1/jobs/{job}/attempts/{attempt}/progress"
point = {"step": 40, "time": time.time(), "metrics": {"loss": 0.5}}
body = json.dumps({"step": 40, "total_steps": 100, "points": [point]}).encode()
request = urllib.request.Request(url, data=body, headers={
    "Authorization": "Bearer " + e["TRAINPLANE_ATTEMPT_TOKEN"],
    "Content-Type": "application/json",
})
status = urllib.request.urlopen(request, timeout=10).status
print("reported", status, "restarts left", e["TRAINPLANE_RESTARTS_LEFT"],
      "checkpoints", e["TRAINPLANE_CHECKPOINT_URI"], flush=True)
time.sleep(600)
"""


@pytest.fixture
def served(fast_settings: Settings, ray_head: LocalRayHead, db_url: str) -> Iterator[Settings]:
    """The API on a real port, as the runs reach it, and a scheduler that
    hands that address to them."""
    with api_on_a_port(fast_settings) as settings:
        register_local(db_url, ray_head.address)
        with running_scheduler(settings):
            yield settings


@pytest.mark.postgres_only
def test_a_run_that_stops_advancing_is_stopped_as_stuck_and_restarted(api, served):
    spec = small_spec(
        "hangs",
        gpus=1,
        stuck_after="2s",
        retries={"max_restarts": 1, "backoff_seconds": 0},
        entrypoint={"command": ["python", "-c", REPORT_THEN_HANG]},
    )
    job_id = api.post("/v1/jobs", json=spec).json()["id"]

    job = wait_for(
        lambda: (j := api.get(f"/v1/jobs/{job_id}").json())["status"] == "FAILED" and j,
        90,
        "the job to fail as stuck twice",
    )

    assert re.fullmatch(
        r"stuck: no progress for \d+s \(last step 40\) \(after 1 restart\)", job["reason"]
    )
    assert [(a["number"], a["status"]) for a in job["attempts"]] == [(1, "FAILED"), (2, "FAILED")]
    assert job["progress"]["attempt"] == 2
    assert (job["progress"]["step"], job["progress"]["total_steps"]) == (40, 100)
    points = api.get(f"/v1/jobs/{job_id}/metrics").json()["points"]
    assert [(p["attempt"], p["step"], p["metrics"]) for p in points] == [
        (1, 40, {"loss": 0.5}),
        (2, 40, {"loss": 0.5}),
    ]
    events = [e["to_status"] for e in api.get(f"/v1/jobs/{job_id}/events").json()["items"]]
    assert "RESTARTING" in events
    # Each attempt is told the job's one checkpoint folder, the one the API lists.
    folder = api.get(f"/v1/jobs/{job_id}/checkpoints").json()["storage"]
    assert folder.endswith(f"/default/{job_id}/checkpoints")
    for number, left in ((1, 1), (2, 0)):
        log = api.get(f"/v1/jobs/{job_id}/logs", params={"attempt": number}).text
        assert f"reported 200 restarts left {left} checkpoints {folder}" in log
