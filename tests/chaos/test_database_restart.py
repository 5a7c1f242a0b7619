"""PostgreSQL crashing (immediate shutdown) and coming back while clients
submit and list: the API answers 503 with Retry-After while it is down, never
a 500, recovers by itself (the same server process), and loses nothing it
acknowledged; the scheduler carries every job to the end."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.chaos.conftest import TERMINAL, appender, server_env
from tests.clients import RetryingSubmitter, assert_one_ray_job_per_attempt, jobs_of
from tests.scheduler.conftest import register_local, wait_for
from trainplane.db import migrate
from trainplane.testing.postgres import ThrowawayPostgres
from trainplane.testing.server import ServerProcess

JOBS = 10
DOWN_SECONDS = 5


@pytest.fixture
def own_postgres() -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL of this test's own (the suite's shared one must not go
    down) that keeps every commit it acknowledged through a crash."""
    with ThrowawayPostgres(durable_commits=True) as postgres:
        yield postgres


class Reader:
    """Lists jobs and reads one, in a loop, noting every answer's status and
    Retry-After until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answers: list[tuple[float, int, str | None]] = []
        self.refused = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=15) as http:
            while not self.stopped.is_set():
                for path in ("/v1/jobs?limit=20", "/v1/jobs/01m8aaaaaaaaaaaaaaaaaaaaaa"):
                    try:
                        answer = http.get(path)
                    except httpx.TransportError:
                        self.refused += 1
                        continue
                    retry_after = answer.headers.get("Retry-After")
                    self.answers.append((time.monotonic(), answer.status_code, retry_after))
                time.sleep(0.05)


def test_a_database_restart_under_load_is_a_503_and_loses_nothing(
    own_postgres: ThrowawayPostgres, ray_head, tmp_path: Path
) -> None:
    db_url = own_postgres.create_database("trainplane")
    migrate.upgrade(db_url)
    register_local(db_url, ray_head.address)
    ran = tmp_path / "ran.txt"
    server = ServerProcess(server_env(db_url, tmp_path / "home"), log_path=tmp_path / "server.log")
    with server:
        submitter = RetryingSubmitter([server.url], give_up_after=90)
        reader = Reader(server.url)
        threads = [
            threading.Thread(target=reader.run),
            threading.Thread(
                target=lambda: [submitter.submit(i, appender(i, ran)) for i in range(JOBS)]
            ),
        ]
        for thread in threads:
            thread.start()
        try:
            wait_for(lambda: len(submitter.acknowledged) >= 3, 60, "three acknowledged jobs")
            down_at = time.monotonic()
            own_postgres.crash()
            time.sleep(DOWN_SECONDS)
            own_postgres.resume()
            up_at = time.monotonic()
            threads[1].join(120)
            # The API answers again without anyone restarting it.
            wait_for(
                lambda: any(t > up_at and code == 200 for t, code, _ in reader.answers),
                30,
                "a 200 after the restart",
            )
        finally:
            reader.stopped.set()
            for thread in threads:
                thread.join(60)
        ids = sorted(submitter.acknowledged.values())
        assert len(ids) == JOBS
        try:
            jobs = wait_for(
                lambda: (
                    (js := jobs_of(server.url, ids))
                    and all(j["status"] in TERMINAL for j in js)
                    and js
                ),
                180,
                "every job to end",
            )
        except AssertionError:
            states = [
                (j["status"], j["reason"], [a["status"] for a in j["attempts"]])
                if "attempts" in j
                else j
                for j in jobs_of(server.url, ids)
            ]
            raise AssertionError(f"not every job ended: {states}") from None
        assert server.process is not None and server.process.poll() is None

    statuses = Counter(code for _, code, _ in reader.answers)
    # A missing job is a 404 (the reader asks for one that does not exist).
    assert set(statuses) <= {200, 404, 503}, statuses
    assert reader.refused == 0, "the server kept accepting connections"
    unavailable = [(t, retry) for t, code, retry in reader.answers if code == 503]
    assert unavailable, "the outage was seen"
    assert all(retry and int(retry) > 0 for _, retry in unavailable)
    assert all(down_at <= t <= up_at + 30 for t, _ in unavailable), "503s only around the outage"
    assert all(answer.headers.get("Retry-After") for answer in submitter.unavailable)

    assert [j["status"] for j in jobs] == ["SUCCEEDED"] * JOBS, [j["reason"] for j in jobs]
    assert all(len(j["attempts"]) == 1 for j in jobs), [j["attempts"] for j in jobs]
    assert Counter(ran.read_text().split()) == dict.fromkeys(ids, 1), "each ran exactly once"
    assert_one_ray_job_per_attempt(ray_head.address, jobs)
