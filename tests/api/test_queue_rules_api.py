"""Queue positions and plans are ranked with the server's own scheduler
settings, not the defaults."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from tests.factories import make_cluster, make_project
from tests.services.test_service_order import _job, _ran
from trainplane.api.app import create_app
from trainplane.config import Settings


@pytest.fixture
def jobs(session):
    """An older job requeued after 2 GPU-hours and a newer one of no service."""
    make_cluster(session, "local", gpus=1)
    project = make_project(session, "a")
    older = _job(session, "older", 1, project=project, ago=timedelta(hours=3))
    _ran(session, older, hours=2)
    newer = _job(session, "newer", 1, project=project, ago=timedelta(minutes=1))
    return older, newer


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
