"""Against a real ``trainplane server`` process (uvicorn, its event loop, its
threads), on PostgreSQL and SQLite: what only a real server shows.

- Anonymous bodies are refused before they are read, so a flood of big YAML
  from nobody cannot stall the event loop (once, a 500 KB list held
  ``/healthz`` for 5.9 s).
- A followed log ends within seconds of its token being revoked or expiring.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.factories import small_spec
from trainplane.services.logs import TOKEN_CHECK_SECONDS
from trainplane.testing.server import ServerProcess

ROOT = "a-bootstrap-token-for-live-tests"
AUTH = {"Authorization": f"Bearer {ROOT}"}
# Generous for a loaded test machine; parsing one such body on the event loop took seconds.
HEALTHZ_BOUND_SECONDS = 1.0
# Revocation is noticed at the next check; the rest is the answer reaching the client.
STREAM_END_BOUND_SECONDS = TOKEN_CHECK_SECONDS + 3.0


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[str]:
    env = {
        "TRAINPLANE_DATABASE_URL": db_url,
        "TRAINPLANE_HOME": str(tmp_path / "home"),
        "TRAINPLANE_BOOTSTRAP_TOKEN": ROOT,
        "TRAINPLANE_AUTO_MIGRATE": "false",
    }
    with ServerProcess(env, args=("--no-scheduler",), log_path=tmp_path / "server.log") as live:
        yield live.url


def test_anonymous_yaml_bodies_are_refused_unread_and_healthz_stays_quick(server):
    big = ("x:\n" + "  - 1\n" * 120_000).encode()  # ~700 KB: seconds of pure-Python parsing
    answers: list[int | str] = []

    def post_anonymously() -> None:
        try:
            answer = httpx.post(
                f"{server}/v1/jobs",
                content=big,
                headers={"content-type": "application/yaml"},
                timeout=60,
            )
            answers.append(answer.status_code)
        except httpx.TransportError as exc:  # refused before the upload ended
            answers.append(type(exc).__name__)

    worst = 0.0
    for _ in range(3):
        posters = [threading.Thread(target=post_anonymously) for _ in range(3)]
        for poster in posters:
            poster.start()
        time.sleep(0.05)
        started = time.monotonic()
        assert httpx.get(f"{server}/healthz", timeout=30).status_code == 200
        worst = max(worst, time.monotonic() - started)
        for poster in posters:
            poster.join()
    assert worst < HEALTHZ_BOUND_SECONDS, f"/healthz took {worst:.2f} s"
    assert answers and all(a != 422 and a != 500 for a in answers), answers
    assert 401 in answers, answers


def _token(server: str, name: str, **extra: object) -> tuple[str, str]:
    body = {"name": name, "project": "default", "role": "viewer", **extra}
    created = httpx.post(f"{server}/v1/tokens", json=body, headers=AUTH, timeout=30)
    assert created.status_code == 201, created.text
    return created.json()["token"], created.json()["id"]


def _follow(server: str, job_id: str, secret: str, events: list[tuple[str, str]]) -> float:
    """Reads the followed log into ``events`` until it ends; returns when it ended."""
    headers = {"Authorization": f"Bearer {secret}"}
    url = f"{server}/v1/jobs/{job_id}/logs"
    with httpx.stream("GET", url, params={"follow": "true"}, headers=headers, timeout=60) as r:
        assert r.status_code == 200
        name = "message"
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, line[6:]))
    return time.monotonic()


def _queued_job(server: str) -> str:
    created = httpx.post(f"{server}/v1/jobs", json=small_spec("waits", 1), headers=AUTH, timeout=30)
    assert created.status_code == 201, created.text
    return created.json()["id"]


def test_revoking_a_token_ends_its_followed_log_within_seconds(server):
    job_id = _queued_job(server)  # no scheduler: it stays QUEUED, its log never ends
    secret, token_id = _token(server, "follower")
    events: list[tuple[str, str]] = []
    ended: list[float] = []
    reader = threading.Thread(target=lambda: ended.append(_follow(server, job_id, secret, events)))
    reader.start()
    deadline = time.monotonic() + 30
    while not events and time.monotonic() < deadline:
        time.sleep(0.1)
    assert events[0][0] == "status", events  # the stream is open and live
    time.sleep(TOKEN_CHECK_SECONDS + 0.5)  # past one check that finds the token fine
    assert not ended, "the stream ended while its token still worked"
    revoked = time.monotonic()
    assert httpx.delete(f"{server}/v1/tokens/{token_id}", headers=AUTH).status_code == 204
    reader.join(STREAM_END_BOUND_SECONDS + 5)
    assert ended, "the stream outlived its token"
    assert ended[0] - revoked < STREAM_END_BOUND_SECONDS, ended[0] - revoked
    name, data = events[-1]
    assert name == "error" and json.loads(data) == {
        "status": 401,
        "detail": "token 'follower' was revoked",
    }


def test_an_expiring_token_ends_its_followed_log_within_seconds(server):
    job_id = _queued_job(server)
    secret, _ = _token(server, "short-lived", expires_in=3)
    events: list[tuple[str, str]] = []
    started = time.monotonic()
    ended = _follow(server, job_id, secret, events)
    assert ended - started < 3 + STREAM_END_BOUND_SECONDS
    name, data = events[-1]
    assert name == "error" and "'short-lived' expired" in json.loads(data)["detail"]
