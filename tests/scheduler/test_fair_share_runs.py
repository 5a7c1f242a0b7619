"""Fair share on a real local Ray cluster of 4 CPU worker slots: two projects
flood it with short 1-GPU jobs, the first project submitting all of its jobs
before the second. While both still have jobs waiting, each project's share of
the GPU-seconds (read from ``GET /v1/usage``, attempts clipped to that window)
follows its weight. FIFO alone would give the first project everything."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.conftest import local_ray_head
from tests.factories import small_spec
from trainplane.backends.local_ray import LocalRayHead
from trainplane.db.base import utcnow
from trainplane.serve.processes import running_scheduler
from trainplane.testing.clusters import register_local_cluster

SLOTS = 4
JOBS_PER_PROJECT = 12
JOB = ["python", "-c", "import time; time.sleep(2)"]

pytestmark = pytest.mark.postgres_only


@pytest.fixture(scope="module")
def four_slots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayHead]:
    with local_ray_head(tmp_path_factory, slots=SLOTS) as head:
        yield head


def _queued(api, project: str) -> int:
    page = api.get("/v1/jobs", params={"project": project, "status": "QUEUED", "limit": 100})
    return len(page.json()["items"])


def _flood(api, fast_settings, db_url, head, weights: dict[str, float]) -> dict[str, float]:
    """GPU-hours per project while every project still had jobs waiting."""
    for project, weight in weights.items():
        assert api.post("/v1/projects", json={"name": project}).status_code == 201
        assert api.patch(f"/v1/projects/{project}", json={"weight": weight}).status_code == 200
    for project in weights:  # the first project's jobs all come first
        for i in range(JOBS_PER_PROJECT):
            spec = small_spec(f"{project}-{i}", gpus=1, entrypoint={"command": JOB})
            answer = api.post("/v1/jobs", json=spec | {"project": project})
            assert answer.status_code == 201, answer.text
    began = utcnow()
    register_local_cluster(db_url, head.address, name="four", slots=SLOTS)
    with running_scheduler(fast_settings):
        deadline = time.monotonic() + 240
        while all(_queued(api, p) for p in weights):
            assert time.monotonic() < deadline, "the flood did not drain"
            time.sleep(0.5)
        ended = utcnow()
        # Leave nothing running for the next test.
        for project in weights:
            while ids := [
                j["id"]
                for j in api.get("/v1/jobs", params={"project": project, "limit": 100}).json()[
                    "items"
                ]
                if not j["terminal"] and j["status"] != "CANCELLING"
            ]:
                for job_id in ids:
                    api.post(f"/v1/jobs/{job_id}/cancel")
        deadline = time.monotonic() + 60
        while any(
            not j["terminal"]
            for p in weights
            for j in api.get("/v1/jobs", params={"project": p, "limit": 100}).json()["items"]
        ):
            assert time.monotonic() < deadline, "the cancelled jobs did not end"
            time.sleep(0.5)
    usage = api.get(
        "/v1/usage", params={"since": began.isoformat(), "until": ended.isoformat()}
    ).json()
    return {row["project"]: row["gpu_hours"] for row in usage["by_project"]}


@pytest.mark.parametrize(
    ("weights", "share_of_a"), [({"a": 1, "b": 1}, 0.5), ({"a": 3, "b": 1}, 0.75)]
)
def test_flooding_projects_share_the_gpu_seconds_by_weight(
    api, fast_settings, db_url, four_slots, weights, share_of_a
):
    used = _flood(api, fast_settings, db_url, four_slots, weights)
    total = used.get("a", 0) + used.get("b", 0)
    assert total > 0, used
    print(f"weights {weights}: a had {used.get('a', 0) / total:.1%} of {total * 3600:.0f} GPU-s")
    assert abs(used.get("a", 0) / total - share_of_a) <= 0.1, used
