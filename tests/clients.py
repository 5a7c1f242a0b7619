"""Clients of a running ``trainplane server`` for the tests that break things:
a submitter that keeps going through outages, and what the server and its Ray
cluster say about the jobs afterwards."""

from __future__ import annotations

import threading
import time
import uuid

import httpx
from ray.job_submission import JobSubmissionClient

RETRIABLE = {502, 503, 504}


class RetryingSubmitter:
    """Submits as a careful user's script or a CI pipeline does: the same
    Idempotency-Key on every try, the next server (when there are several)
    after a refused connection, a wait of the server's Retry-After after a
    503. Only a 201 or 200 counts as acknowledged."""

    def __init__(self, urls: list[str], *, give_up_after: float = 60) -> None:
        self.urls = urls
        self.give_up_after = give_up_after
        self.acknowledged: dict[str, str] = {}  # idempotency key -> job id
        self.unavailable: list[httpx.Response] = []  # the 5xx answers seen
        self.lock = threading.Lock()

    def submit(self, index: int, spec: dict, first: int = 0) -> str:
        key = f"test-{index}-{uuid.uuid4().hex[:8]}"
        deadline = time.monotonic() + self.give_up_after
        tries = 0
        while time.monotonic() < deadline:
            url = self.urls[(first + tries) % len(self.urls)]
            tries += 1
            try:
                answer = httpx.post(
                    f"{url}/v1/jobs", json=spec, headers={"Idempotency-Key": key}, timeout=10
                )
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            if answer.status_code in RETRIABLE:
                with self.lock:
                    self.unavailable.append(answer)
                time.sleep(min(float(answer.headers.get("Retry-After", 1)), 2.0))
                continue
            assert answer.status_code in (200, 201), answer.text
            job_id = answer.json()["id"]
            with self.lock:
                self.acknowledged[key] = job_id
            return job_id
        raise AssertionError(f"job {index} was never acknowledged")


def jobs_of(url: str, ids: list[str]) -> list[dict]:
    return [httpx.get(f"{url}/v1/jobs/{job_id}", timeout=10).json() for job_id in ids]


def assert_one_ray_job_per_attempt(ray_address: str, jobs: list[dict]) -> None:
    attempt_ids = {a["id"] for job in jobs for a in job["attempts"]}
    ray_jobs = [
        j for j in JobSubmissionClient(ray_address).list_jobs() if j.submission_id in attempt_ids
    ]
    submitted = [j.submission_id for j in ray_jobs]
    assert sorted(submitted) == sorted(attempt_ids), "every attempt is exactly one Ray job"
