"""Two ``trainplane server`` processes (API and scheduler each) on one
PostgreSQL behave as one: jobs submitted through both, one server killed
with SIGKILL while jobs run and submissions still arrive, and every
acknowledged job runs exactly once (one attempt, one Ray job, one line in the
file its command appends to). Logs follow from either server, and both log
JSON lines that carry job ids.

Each job is a Ray job, and on two cores Ray spends about 1.3 s of CPU on each
however little it does, so CI runs 60 of them (about 100 s). The acceptance
run is 200 (about 5 minutes)::

    TRAINPLANE_TEST_REPLICA_JOBS=200 .venv/bin/pytest tests/scheduler/test_replicas.py
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ray.job_submission import JobSubmissionClient

from tests.clients import RetryingSubmitter
from tests.conftest import local_ray_head
from tests.factories import small_spec
from tests.scheduler.conftest import FAST, register_local, wait_for
from trainplane.backends.local_ray import LocalRayHead
from trainplane.testing.server import ServerProcess

pytestmark = pytest.mark.postgres_only

JOBS = int(os.environ.get("TRAINPLANE_TEST_REPLICA_JOBS", "60"))
# Trivial jobs, many at once: what is measured is the control plane.
SLOTS = 8
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


@pytest.fixture(scope="module")
def wide_ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayHead]:
    with local_ray_head(tmp_path_factory, slots=SLOTS) as head:
        yield head


def _job(index: int, ran: Path) -> dict:
    # The command appends the job's id: a job run twice shows twice.
    append = f"echo $TRAINPLANE_JOB_ID >> {ran}"
    return small_spec(f"replica-{index}", gpus=1, entrypoint={"command": ["sh", "-c", append]})


@pytest.mark.timeout(120 + 4 * JOBS)
def test_two_servers_run_every_job_exactly_once_when_one_is_killed(
    db_url: str, tmp_path: Path, wide_ray_head: LocalRayHead
) -> None:
    register_local(db_url, wide_ray_head.address, slots=SLOTS)
    env = {
        "TRAINPLANE_DATABASE_URL": db_url,
        "TRAINPLANE_HOME": str(tmp_path / "home"),
        "TRAINPLANE_LOG_FORMAT": "json",
        **{f"TRAINPLANE_{key.upper()}": str(value) for key, value in FAST.items()},
    }
    logs = [tmp_path / "server-a.log", tmp_path / "server-b.log"]
    servers = [ServerProcess(env, log_path=log, log_level="info").start() for log in logs]
    urls = [s.url for s in servers]
    ran = tmp_path / "ran.txt"
    submitter = RetryingSubmitter(urls)
    try:
        # Each half goes first to its own server, from threads of its own.
        halves = [
            threading.Thread(
                target=lambda half=half: [
                    submitter.submit(i, _job(i, ran), first=half) for i in range(half, JOBS, 2)
                ]
            )
            for half in (0, 1)
        ]
        for thread in halves:
            thread.start()
        # Crash server A once jobs run on both and submissions still arrive.
        wait_for(lambda: ran.exists() and len(ran.read_text().split()) >= JOBS // 4, 120, "runs")
        servers[0].kill()
        for thread in halves:
            thread.join(120)
        ids = sorted(submitter.acknowledged.values())
        assert len(ids) == JOBS

        survivor = urls[1]

        def statuses() -> list[dict]:
            found: list[dict] = []
            cursor = None
            while True:
                params = {"limit": 200, **({"cursor": cursor} if cursor else {})}
                page = httpx.get(f"{survivor}/v1/jobs", params=params, timeout=10).json()
                found += page["items"]
                cursor = page["next_cursor"]
                if not cursor:
                    return found

        jobs = wait_for(
            lambda: (js := statuses()) and all(j["status"] in TERMINAL for j in js) and js,
            60 + 3 * JOBS,
            "every job to end on the surviving server",
        )
        # Logs follow from any server: a job submitted through A, read from B.
        followed = httpx.get(
            f"{survivor}/v1/jobs/{ids[0]}/logs", params={"follow": "true"}, timeout=30
        ).text
        details = [httpx.get(f"{survivor}/v1/jobs/{i}", timeout=10).json() for i in ids]
    finally:
        for server in servers:
            server.stop()

    assert sorted(j["id"] for j in jobs) == ids, "no job lost, none invented"
    assert Counter(j["status"] for j in jobs) == {"SUCCEEDED": JOBS}
    assert all(len(d["attempts"]) == 1 for d in details), "no attempt launched twice"
    assert Counter(ran.read_text().split()) == dict.fromkeys(ids, 1), "each ran exactly once"
    attempt_ids = {d["attempts"][0]["id"] for d in details}
    ray_jobs = [
        j.submission_id
        for j in JobSubmissionClient(wide_ray_head.address).list_jobs()
        if j.submission_id in attempt_ids
    ]
    assert sorted(ray_jobs) == sorted(attempt_ids), "one Ray job per attempt"
    assert "event: status" in followed and "SUCCEEDED" in followed, followed

    # Both servers logged JSON lines only, the scheduler's with job ids.
    entries = [json.loads(line) for log in logs for line in log.read_text().splitlines() if line]
    assert {e["level"] for e in entries} <= {"debug", "info", "warning", "error"}
    logged_jobs = {e["job_id"] for e in entries if "job_id" in e}
    assert logged_jobs & set(ids)
