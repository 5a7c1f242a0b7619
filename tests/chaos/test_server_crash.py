"""``trainplane server`` (API and scheduler in one process) killed with
SIGKILL twice: while clients submit and jobs launch, then while jobs run; each
time a new one starts on the same port. The clients retry with the same
Idempotency-Key. Nothing acknowledged is lost, no attempt launches twice,
every job ends SUCCEEDED having run once."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from tests.chaos.conftest import TERMINAL, appender
from tests.clients import RetryingSubmitter, assert_one_ray_job_per_attempt, jobs_of
from tests.scheduler.conftest import register_local, wait_for
from trainplane.testing.server import ServerProcess

pytestmark = pytest.mark.postgres_only
JOBS = 12


def test_kill_9_during_submissions_and_runs_loses_nothing(chaos_env, db_url, ray_head, tmp_path):
    register_local(db_url, ray_head.address)
    log = tmp_path / "server.log"  # every server writes here
    ran = tmp_path / "ran.txt"
    server = ServerProcess(chaos_env, log_path=log, log_level="info").start()
    url, port = server.url, server.port
    submitter = RetryingSubmitter([url])
    clients = threading.Thread(
        target=lambda: [submitter.submit(i, appender(i, ran)) for i in range(JOBS)]
    )
    try:
        clients.start()
        # Crash while submissions arrive and the first jobs launch.
        wait_for(lambda: len(submitter.acknowledged) >= 3, 60, "three acknowledged submissions")
        server.kill()
        server = ServerProcess(chaos_env, log_path=log, log_level="info", port=port).start()
        clients.join(120)
        assert not clients.is_alive()
        ids = sorted(submitter.acknowledged.values())
        assert len(ids) == JOBS
        # Crash again while some run.
        wait_for(lambda: any(j["status"] == "RUNNING" for j in jobs_of(url, ids)), 60, "a run")
        server.kill()
        server = ServerProcess(chaos_env, log_path=log, log_level="info", port=port).start()
        jobs = wait_for(
            lambda: (js := jobs_of(url, ids)) and all(j["status"] in TERMINAL for j in js) and js,
            240,
            "every job to end",
        )
    finally:
        server.stop()
    assert [j["status"] for j in jobs] == ["SUCCEEDED"] * JOBS, [j["reason"] for j in jobs]
    assert all(len(j["attempts"]) == 1 for j in jobs), [j["attempts"] for j in jobs]
    assert Counter(ran.read_text().split()) == dict.fromkeys(ids, 1), "each ran exactly once"
    assert_one_ray_job_per_attempt(ray_head.address, jobs)
