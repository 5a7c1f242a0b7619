"""``trainplane server`` killed with SIGKILL mid-sweep, while its first trials
run and before the last are made, then started again on the same port and
database: the trials made before the crash are the same jobs (ids and numbers
unchanged), no number is made twice, the rest are made, and the sweep
completes, each trial having run once."""

from __future__ import annotations

import httpx
import pytest

from tests.chaos.conftest import TERMINAL
from tests.clients import assert_one_ray_job_per_attempt, jobs_of
from tests.runtime.test_training import MLP
from tests.scheduler.conftest import register_local, wait_for
from trainplane.testing.server import ServerProcess

pytestmark = pytest.mark.postgres_only
TRIALS = 4

SWEEP = {
    "kind": "sweep",
    "name": "crash-lr",
    "trial": {
        "kind": "train",
        # A few seconds a trial: long enough to be running when the server dies.
        "entrypoint": {
            "function": "train:train_loop",
            "working_dir": str(MLP),
            "args": {"steps": 20, "step_sleep": 0.1},
        },
        "resources": {"gpus": 1},
    },
    "parameters": {
        "entrypoint.args.lr": {"distribution": "log_uniform", "low": 1e-4, "high": 1e-1}
    },
    "objective": {"metric": "loss", "mode": "min"},
    "search": {"algorithm": "random", "trials": TRIALS, "parallel": 2, "seed": 1},
}


def trials_of(url: str, sweep_id: str) -> list[dict]:
    answer = httpx.get(f"{url}/v1/jobs/{sweep_id}/trials", timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()["items"]


def running(trials: list[dict]) -> list[dict] | None:
    """``trials`` once one of them runs."""
    return trials if any(t["status"] == "RUNNING" for t in trials) else None


def test_kill_9_mid_sweep_keeps_its_trials_and_makes_none_twice(
    chaos_env, db_url, ray_head, tmp_path
):
    register_local(db_url, ray_head.address)
    log = tmp_path / "server.log"  # both servers write here
    server = ServerProcess(chaos_env, log_path=log, log_level="info").start()
    url, port = server.url, server.port
    try:
        answer = httpx.post(f"{url}/v1/jobs", json=SWEEP, timeout=10)
        assert answer.status_code == 201, answer.text
        sweep_id = answer.json()["id"]
        before = wait_for(lambda: running(trials_of(url, sweep_id)), 120, "a running trial")
        server.kill()
        server = ServerProcess(chaos_env, log_path=log, log_level="info", port=port).start()
        sweep = wait_for(
            lambda: (s := jobs_of(url, [sweep_id])[0])["status"] in TERMINAL and s,
            240,
            "the sweep to end",
        )
        after = trials_of(url, sweep_id)
        children = httpx.get(f"{url}/v1/jobs", params={"parent": sweep_id}, timeout=10).json()
        jobs = jobs_of(url, [t["id"] for t in after])
    finally:
        server.stop()
    assert len(before) < TRIALS, "killed mid-sweep"
    assert sweep["status"] == "SUCCEEDED", sweep["reason"]
    assert sorted(t["number"] for t in after) == list(range(1, TRIALS + 1))
    made_before = {t["number"]: t["id"] for t in before}
    assert {t["number"]: t["id"] for t in after if t["number"] in made_before} == made_before
    # No trial job without its number (a half-made trial would show here).
    assert sorted(c["id"] for c in children["items"]) == sorted(t["id"] for t in after)
    assert [j["status"] for j in jobs] == ["SUCCEEDED"] * TRIALS, [j["reason"] for j in jobs]
    assert all(len(j["attempts"]) == 1 for j in jobs), [j["attempts"] for j in jobs]
    assert_one_ray_job_per_attempt(ray_head.address, jobs)
