"""Queue positions and plans are ranked with the server's own scheduler
settings, not the defaults."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.services.test_service_order import requeued_and_new
from trainplane.api.app import create_app
from trainplane.config import Settings


@pytest.fixture
def jobs(session):
    return requeued_and_new(session)


def _positions(settings: Settings, older: str, newer: str) -> tuple[int, int]:
    with TestClient(create_app(settings)) as api:
        shown = {j: api.get(f"/v1/jobs/{j}").json()["queue_position"] for j in (older, newer)}
        listed = {j["id"]: j["queue_position"] for j in api.get("/v1/jobs").json()["items"]}
    assert listed == shown
    return shown[older], shown[newer]


def test_queue_positions_follow_the_servers_service_levels(settings, jobs):
    older, newer = jobs
    # Default levels (1, 10, 100 GPU-hours): the older job is past the first.
    assert _positions(settings, older, newer) == (2, 1)
    # One level at 1000 GPU-hours: both are level 0, so submit time decides.
    flat = settings.model_copy(update={"service_levels_gpu_hours": [1000.0]})
    assert _positions(flat, older, newer) == (1, 2)
