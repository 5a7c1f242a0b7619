"""Cost accounting on a real local Ray cluster: a 2-worker job on a cluster
priced at 2.50 per GPU-hour costs its measured GPU time at that price, on
the job and in the usage report of its project."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.factories import small_spec
from tests.scheduler.conftest import SLOTS, wait_for
from trainplane.db.base import utcnow
from trainplane.serve.processes import running_scheduler
from trainplane.testing.clusters import register_local_cluster

PRICE = 2.5


@pytest.fixture
def priced_scheduler(fast_settings, ray_head, db_url):
    register_local_cluster(db_url, ray_head.address, slots=SLOTS, price_per_gpu_hour=PRICE)
    with running_scheduler(fast_settings):
        yield


def test_a_two_worker_job_costs_its_gpu_time_at_the_cluster_price(api, priced_scheduler):
    spec = small_spec(
        "priced", gpus=2, entrypoint={"command": ["python", "-c", "import time; time.sleep(3)"]}
    )
    job_id = api.post("/v1/jobs", json=spec).json()["id"]
    job = wait_for(
        lambda: (j := api.get(f"/v1/jobs/{job_id}").json())["terminal"] and j, 120, "the job"
    )
    assert job["status"] == "SUCCEEDED", job["reason"]
    (attempt,) = job["attempts"]
    started = _time(attempt["started_at"])
    finished = _time(attempt["finished_at"])
    measured = (finished - started).total_seconds()
    assert measured >= 3  # the job slept that long
    gpu_hours = measured * 2 / 3600
    # The API rounds GPU-hours and cost to 6 decimals.
    assert job["gpu_hours"] == pytest.approx(gpu_hours, abs=1e-5)
    assert job["cost"] == pytest.approx(gpu_hours * PRICE, abs=1e-5)

    usage = api.get("/v1/usage", params={"until": utcnow().isoformat()}).json()
    (project,) = usage["by_project"]
    assert project["project"] == "default" and project["jobs"] == 1
    assert project["gpu_hours"] == pytest.approx(gpu_hours, abs=1e-5)
    assert project["cost"] == pytest.approx(gpu_hours * PRICE, abs=1e-5)
    assert usage["by_job"][0]["id"] == job_id


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
