"""Two schedulers at once, as real processes on PostgreSQL with the local Ray
cluster: each attempt launches exactly once. (Schedulers killed mid-flight:
tests/chaos.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.clients import assert_one_ray_job_per_attempt, jobs_of
from tests.factories import small_spec
from tests.scheduler.conftest import FAST, register_local, wait_for
from trainplane.testing.server import ServerProcess

pytestmark = pytest.mark.postgres_only
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


@pytest.fixture
def env(db_url, tmp_path, ray_head):
    register_local(db_url, ray_head.address)
    return {
        "TRAINPLANE_DATABASE_URL": db_url,
        "TRAINPLANE_HOME": str(tmp_path / "home"),
        **{f"TRAINPLANE_{key.upper()}": str(value) for key, value in FAST.items()},
    }


def sleeper(name: str, seconds: float = 2.0) -> dict:
    return small_spec(
        name,
        gpus=1,
        entrypoint={
            "command": ["python", "-c", f"import time; print('{name}'); time.sleep({seconds})"]
        },
    )


def test_two_schedulers_launch_each_attempt_exactly_once(env, ray_head, tmp_path):
    api = ServerProcess(env, args=("--no-scheduler",), log_path=tmp_path / "api.log").start()
    trainplane = Path(sys.executable).with_name("trainplane")
    schedulers = [
        subprocess.Popen(
            [str(trainplane), "scheduler", "--log-level", "warning"],
            env={**os.environ, **env},
            stdout=open(tmp_path / f"scheduler-{i}.log", "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        for i in range(2)
    ]
    try:
        ids = [
            httpx.post(f"{api.url}/v1/jobs", json=sleeper(f"pair-{i}", 0.5), timeout=10).json()[
                "id"
            ]
            for i in range(6)
        ]
        jobs = wait_for(
            lambda: (
                (js := jobs_of(api.url, ids)) and all(j["status"] in TERMINAL for j in js) and js
            ),
            180,
            "every job to end",
        )
    finally:
        for process in schedulers:
            process.terminate()
        for process in schedulers:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
        api.stop()
    assert [j["status"] for j in jobs] == ["SUCCEEDED"] * 6, [j["reason"] for j in jobs]
    assert all(len(j["attempts"]) == 1 for j in jobs)
    assert_one_ray_job_per_attempt(ray_head.address, jobs)
    # Both ran to the end and stopped cleanly on SIGTERM.
    assert [p.returncode for p in schedulers] == [0, 0]
