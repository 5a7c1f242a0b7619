"""A real local Ray cluster (2 CPU worker slots), shared by the tests that run
jobs, and an in-process scheduler working against the test database."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import uvicorn

from tests.conftest import RAY_SLOTS as SLOTS
from trainplane.api.app import create_app
from trainplane.backends.local_ray import LocalRayHead
from trainplane.config import Settings
from trainplane.net import free_port
from trainplane.serve.processes import running_scheduler
from trainplane.testing.clusters import register_local_cluster

# Fast loops, and short timeouts, so the tests see what happens in seconds.
FAST = {
    "scheduler_interval_seconds": 0.2,
    "scheduler_poll_seconds": 0.3,
    "scheduler_lease_seconds": 3.0,
    "cluster_probe_seconds": 1.0,
    "cluster_lost_after_seconds": 3.0,
    # Tracking has tests of its own (tests/tracking); here it would only add
    # an MLflow store per test.
    "tracking_enabled": False,
}


@pytest.fixture
def fast_settings(settings: Settings) -> Settings:
    return settings.model_copy(update=FAST)


def register_local(db_url: str, address: str, name: str = "local", slots: int = SLOTS) -> None:
    register_local_cluster(db_url, address, name=name, slots=slots)


@pytest.fixture
def scheduler(fast_settings: Settings, ray_head: LocalRayHead, db_url: str) -> Iterator[None]:
    register_local(db_url, ray_head.address)
    with running_scheduler(fast_settings):
        yield


def wait_for(check: Callable[[], object], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@contextlib.contextmanager
def api_on_a_port(settings: Settings) -> Iterator[Settings]:
    """The API on a real port of 127.0.0.1, as runs reach it; yields
    ``settings`` with that address as the one the scheduler hands to runs."""
    port = free_port()
    settings = settings.model_copy(update={"advertise_url": f"http://127.0.0.1:{port}"})
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, name="test-api", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 20, "the API server")
        yield settings
    finally:
        server.should_exit = True
        thread.join(10)
