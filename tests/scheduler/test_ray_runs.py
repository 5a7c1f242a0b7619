"""Jobs run on a real local Ray cluster through the in-process scheduler."""

from __future__ import annotations

import itertools
import json
import time

import pytest
from ray.job_submission import JobSubmissionClient

from tests.factories import small_spec
from tests.scheduler.conftest import wait_for

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


def command(code: str) -> list[str]:
    return ["python", "-c", code]


def finished(api, job_id, timeout=120):
    return wait_for(
        lambda: (job := api.get(f"/v1/jobs/{job_id}").json())["status"] in TERMINAL and job,
        timeout,
        f"job {job_id} to end",
    )


def events(api, job_id):
    return api.get(f"/v1/jobs/{job_id}/events").json()["items"]


def test_jobs_share_a_two_slot_cluster_one_at_a_time(api, scheduler):
    hello = command(
        "import os; print('hello from rank', os.environ['RANK'], 'of', "
        "os.environ['WORLD_SIZE'], os.environ['MASTER_PORT'])"
    )
    ids = [
        api.post(
            "/v1/jobs", json=small_spec(f"gang-{i}", gpus=2, entrypoint={"command": hello})
        ).json()["id"]
        for i in range(3)
    ]
    too_big = api.post("/v1/jobs", json=small_spec("gang-3", gpus=3))
    assert too_big.status_code == 422
    assert "local has 2 cpu" in too_big.json()["detail"]

    jobs = [finished(api, job_id) for job_id in ids]
    assert [j["status"] for j in jobs] == ["SUCCEEDED"] * 3
    # One at a time: each started only after the one before it had ended.
    spans = []
    for job_id in ids:
        history = events(api, job_id)
        started = next(e["created_at"] for e in history if e["to_status"] == "STARTING")
        ended = next(e["created_at"] for e in history if e["to_status"] == "SUCCEEDED")
        spans.append((started, ended))
    for (_, previous_end), (next_start, _) in itertools.pairwise(spans):
        assert previous_end <= next_start
    logs = api.get(f"/v1/jobs/{ids[0]}/logs").text
    assert "hello from rank 0 of 2" in logs and "hello from rank 1 of 2" in logs
    assert "starting 2 CPU workers (gloo)" in logs  # the job says it runs on CPUs


@pytest.mark.postgres_only
def test_exit_code_3_fails_with_the_code_and_log_tail_and_is_retried(api, scheduler):
    spec = small_spec(
        "exit3",
        gpus=1,
        retries={"max_restarts": 1, "backoff_seconds": 0},
        entrypoint={
            "command": command("import sys; print('about to fail', flush=True); sys.exit(3)")
        },
    )
    job = finished(api, api.post("/v1/jobs", json=spec).json()["id"])
    assert job["status"] == "FAILED"
    assert job["reason"].startswith("exit code 3 on cluster local: [rank 0] about to fail")
    assert "after 1 restart" in job["reason"]
    assert [(a["number"], a["status"], a["exit_code"]) for a in job["attempts"]] == [
        (1, "FAILED", 3),
        (2, "FAILED", 3),
    ]
    # RUNNING shows up only if a poll caught the attempt before it exited.
    history = [e["to_status"] for e in events(api, job["id"]) if e["to_status"] != "RUNNING"]
    assert history == ["QUEUED", "STARTING", "RESTARTING", "QUEUED", "STARTING", "FAILED"]
    final = events(api, job["id"])[-1]
    assert "about to fail" in final["message"]


@pytest.mark.postgres_only
def test_cancel_of_a_running_job_stops_its_ray_job_within_10_s(api, scheduler, ray_head):
    spec = small_spec(
        "sleeper", gpus=2, entrypoint={"command": command("import time; time.sleep(600)")}
    )
    job_id = api.post("/v1/jobs", json=spec).json()["id"]
    wait_for(lambda: api.get(f"/v1/jobs/{job_id}").json()["status"] == "RUNNING", 60, "RUNNING")
    attempt_id = api.get(f"/v1/jobs/{job_id}").json()["attempts"][0]["id"]
    started = time.monotonic()
    assert api.post(f"/v1/jobs/{job_id}/cancel").json()["status"] == "CANCELLING"
    ray = JobSubmissionClient(ray_head.address)
    wait_for(
        lambda: str(ray.get_job_status(attempt_id)) in ("STOPPED", "JobStatus.STOPPED"),
        10,
        "the Ray job to stop",
    )
    wait_for(lambda: api.get(f"/v1/jobs/{job_id}").json()["status"] == "CANCELLED", 10, "CANCELLED")
    assert time.monotonic() - started < 10


@pytest.mark.postgres_only
def test_max_runtime_is_enforced(api, scheduler):
    spec = small_spec(
        "slow",
        gpus=1,
        max_runtime="3s",
        entrypoint={"command": command("import time; time.sleep(600)")},
    )
    job = finished(api, api.post("/v1/jobs", json=spec).json()["id"], timeout=60)
    assert job["status"] == "FAILED" and "exceeded max_runtime 3s" in job["reason"]
    assert job["attempts"][0]["status"] == "STOPPED"


@pytest.mark.postgres_only
def test_logs_follow_as_server_sent_events(api, scheduler):
    code = "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.5)"
    job_id = api.post(
        "/v1/jobs", json=small_spec("ticks", gpus=1, entrypoint={"command": command(code)})
    ).json()["id"]
    seen: list[tuple[str, str]] = []
    with api.stream("GET", f"/v1/jobs/{job_id}/logs", params={"follow": "true"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in response.iter_lines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                seen.append((name, line[5:].strip()))
                if name == "end":
                    break
    text = "\n".join(data for name, data in seen if name == "log")
    assert all(f"tick {i}" in text for i in range(3))
    assert seen[-1][0] == "end" and json.loads(seen[-1][1])["status"] == "SUCCEEDED"
    assert any(name == "attempt" for name, _ in seen)
