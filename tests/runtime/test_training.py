"""The runtime end to end: jobs submitted to a real ``trainplane server``,
scheduled on a real local Ray cluster (2 CPU workers, gloo), trained through
Ray Train with each strategy; losses read back from the metrics API.

One train function (examples/mlp) serves every strategy. Runs are cached per
strategy within this module, so each uninterrupted run happens once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.scheduler.conftest import register_local, wait_for
from trainplane.backends.local_ray import LocalRayHead
from trainplane.db import migrate
from trainplane.net import free_port
from trainplane.storage.backends import s3_client
from trainplane.testing.processes import attempt_processes
from trainplane.testing.server import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "mlp"
STEPS = 50
STRATEGIES: dict[str, dict[str, Any]] = {
    "ddp": {"type": "ddp"},
    "fsdp": {"type": "fsdp"},
    "zero1": {"type": "deepspeed", "deepspeed": {"stage": 1}},
    "zero2": {"type": "deepspeed", "deepspeed": {"stage": 2}},
    "zero3": {"type": "deepspeed", "deepspeed": {"stage": 3}},
    "zero3-offload": {"type": "deepspeed", "deepspeed": {"stage": 3, "offload_optimizer": "cpu"}},
}


class Service:
    def __init__(self, url: str, home: Path, s3_endpoint: str) -> None:
        self.url = url
        self.home = home
        self.s3_endpoint = s3_endpoint
        self.http = httpx.Client(base_url=url, timeout=30)
        self.uninterrupted: dict[str, dict[int, float]] = {}
        self._uninterrupted_jobs: dict[str, str] = {}

    def submit(
        self,
        strategy: str,
        *,
        sleep: float = 0.0,
        env: dict[str, str] | None = None,
        **spec: Any,
    ) -> str:
        env = {"AWS_ENDPOINT_URL_S3": self.s3_endpoint, **S3_CREDENTIALS, **(env or {})}
        body = {
            "kind": "train",
            "name": f"mlp-{strategy}",
            "entrypoint": {
                "function": "train:train_loop",
                "args": {"steps": STEPS, "step_sleep": sleep},
                "working_dir": str(MLP),
                "env": env,
            },
            "resources": {"gpus": 2},
            "strategy": STRATEGIES[strategy],
            "checkpoint": {"every_steps": 10, "keep_last": 2},
            "retries": {"max_restarts": 2, "backoff_seconds": 0},
            **spec,
        }
        answer = self.http.post("/v1/jobs", json=body)
        assert answer.status_code == 201, answer.text
        return answer.json()["id"]

    def job(self, job_id: str) -> dict[str, Any]:
        return self.http.get(f"/v1/jobs/{job_id}").json()

    def wait(self, job_id: str, timeout: float = 300) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            detail = self.job(job_id)
            if detail["terminal"]:
                return detail
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} did not finish in {timeout}s:\n{self.logs(job_id)}")

    def logs(self, job_id: str) -> str:
        return self.http.get(f"/v1/jobs/{job_id}/logs").text

    def losses(self, job_id: str) -> dict[int, float]:
        """The loss per step; where a step ran twice (before and after a
        resume), the later report."""
        losses: dict[int, float] = {}
        cursor = None
        while True:
            params = {"limit": 10_000, **({"cursor": cursor} if cursor else {})}
            page = self.http.get(f"/v1/jobs/{job_id}/metrics", params=params).json()
            for point in page["points"]:
                losses[point["step"]] = point["metrics"]["loss"]
            cursor = page.get("next_cursor")
            if not cursor:
                return losses

    def succeeded(self, job_id: str) -> dict[str, Any]:
        detail = self.wait(job_id)
        assert detail["status"] == "SUCCEEDED", self.logs(job_id)[-4000:]
        return detail

    def uninterrupted_job(self, strategy: str) -> str:
        """The job of the module's one uninterrupted run with ``strategy``
        (submitted as ``submit(strategy)``), run on first use."""
        if strategy not in self._uninterrupted_jobs:
            job_id = self.submit(strategy)
            self.succeeded(job_id)
            self._uninterrupted_jobs[strategy] = job_id
        return self._uninterrupted_jobs[strategy]

    def trained(self, strategy: str) -> dict[int, float]:
        if strategy not in self.uninterrupted:
            self.uninterrupted[strategy] = self.losses(self.uninterrupted_job(strategy))
        return self.uninterrupted[strategy]


S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


# Preemption is on for this server; only the preemption tests submit high
# and low jobs, so it changes nothing for the others.
PREEMPTION_GRACE_SECONDS = 12
PREEMPTION = {
    "TRAINPLANE_PREEMPTION_ENABLED": "true",
    "TRAINPLANE_PREEMPTION_MIN_RUNTIME_SECONDS": "0",
    "TRAINPLANE_PREEMPTION_GRACE_SECONDS": str(PREEMPTION_GRACE_SECONDS),
}


def start_server(home: Path, ray_head: LocalRayHead, s3_endpoint: str, **env: str) -> ServerProcess:
    """``trainplane server`` on a SQLite store in ``home``, scheduling on the
    local Ray cluster; ``env`` adds to or overrides its environment."""
    db = f"sqlite:///{home / 'trainplane.db'}"
    migrate.upgrade(db)
    register_local(db, ray_head.address)
    port = free_port()
    environment = {
        "TRAINPLANE_DATABASE_URL": db,
        "TRAINPLANE_HOME": str(home),
        "TRAINPLANE_ADVERTISE_URL": f"http://127.0.0.1:{port}",
        "TRAINPLANE_SCHEDULER_POLL_SECONDS": "0.5",
        # The examples are the server's own code folders, as an operator
        # lists a shared one: jobs may name them as their working_dir.
        "TRAINPLANE_SERVER_PATHS": str(ROOT / "examples"),
        # The API lists checkpoints kept on the test S3.
        "AWS_ENDPOINT_URL_S3": s3_endpoint,
        **S3_CREDENTIALS,
        **env,
    }
    return ServerProcess(environment, port=port, log_path=home / "server.log").start()


@pytest.fixture(scope="module")
def service(
    ray_head: LocalRayHead, s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    home = tmp_path_factory.mktemp("service")
    with start_server(home, ray_head, s3_endpoint, **PREEMPTION) as server:
        yield Service(server.url, home, s3_endpoint)


def reference_losses(tmp_path: Path) -> dict[int, float]:
    """The same training in one process with the whole batch: no Ray, no
    distribution, nothing of the strategies."""
    metrics = tmp_path / "reference.jsonl"
    spec = {
        "kind": "train",
        "name": "reference",
        "entrypoint": {"function": "train:train_loop", "args": {"steps": STEPS}},
        "resources": {"gpus": 1},
        "strategy": {"type": "ddp"},
    }
    env = {
        **os.environ,
        "TRAINPLANE_SPEC": json.dumps(spec),
        "TRAINPLANE_METRICS_FILE": str(metrics),
        "TRAINPLANE_DEVICE": "cpu",
    }
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    subprocess.run(
        [sys.executable, "-m", "trainplane.runtime.local"],
        cwd=MLP,
        env=env,
        check=True,
        capture_output=True,
    )
    points = [json.loads(line) for line in metrics.read_text().splitlines()]
    return {p["step"]: p["metrics"]["loss"] for p in points}


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_the_same_function_trains_under_every_strategy(service: Service, strategy: str) -> None:
    losses = service.trained(strategy)
    assert sorted(losses) == list(range(1, STEPS + 1))
    first, last = losses[1], sum(losses[s] for s in range(STEPS - 4, STEPS + 1)) / 5
    assert last < 0.6 * first, losses


def test_ddp_and_fsdp_match_a_single_process_reference(service: Service, tmp_path: Path) -> None:
    reference = reference_losses(tmp_path)
    for strategy in ("ddp", "fsdp"):
        losses = service.trained(strategy)
        for step in (1, 2, 3, 5, 10, 20):
            assert losses[step] == pytest.approx(reference[step], rel=1e-3), (strategy, step)


def kill_when_past(service: Service, job_id: str, step: int, marker: str) -> int:
    """SIGKILL one process of the job's running attempt once it reported ``step``."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        done = service.losses(job_id)
        detail = service.job(job_id)
        assert not detail["terminal"], f"the job ended before the kill:\n{service.logs(job_id)}"
        if done and max(done) >= step:
            attempt = detail["attempts"][-1]["id"]
            victims = attempt_processes(attempt, marker)
            assert victims, f"no {marker} process of attempt {attempt} found"
            os.kill(victims[-1], signal.SIGKILL)
            return max(done)
        time.sleep(0.2)
    raise AssertionError("the job never got far enough to be killed")


def assert_resumed_exactly(service: Service, job_id: str, expected: dict[int, float]) -> None:
    """The run resumed from a checkpoint, and every loss it reported equals
    the uninterrupted run's at that step, every step after the resume point
    included. (Points rank 0 had queued but not yet sent when it was killed
    are lost with it; the resumed run does not report the steps up to its
    checkpoint again.)"""
    logs = service.logs(job_id)
    found = re.search(r"resumed from checkpoint step (\d+)", logs)
    assert found, logs[-3000:]
    resumed_at = int(found.group(1))
    assert resumed_at >= 10
    losses = service.losses(job_id)
    assert set(range(resumed_at + 1, STEPS + 1)) <= set(losses)
    for step, loss in losses.items():
        assert loss == pytest.approx(expected[step], rel=1e-5, abs=1e-6), step


@pytest.mark.parametrize(
    ("strategy", "victim"),
    [
        ("zero3", "RayTrainWorker"),  # the Ray Train worker supervising a rank
        # FSDP2 with its worker killed: the S3 test below. A rank's own
        # training process killed, on a second Ray node: tests/chaos.
    ],
)
def test_a_killed_worker_resumes_from_the_last_checkpoint_exactly(
    service: Service, strategy: str, victim: str
) -> None:
    expected = service.trained(strategy)
    job_id = service.submit(strategy, sleep=0.1)
    kill_when_past(service, job_id, 15, victim)
    detail = service.succeeded(job_id)
    assert len(detail["attempts"]) == 1  # Ray Train restarted the workers in place
    # ... and told the control plane, which spent one of the job's 2 restarts.
    notes = [e["reason"] for e in _events(service, job_id) if "in place" in e["reason"]]
    assert len(notes) == 1 and "worker group restarted in place (restart 1 of 2)" in notes[0], notes
    assert_resumed_exactly(service, job_id, expected)


def test_a_lost_attempt_is_retried_and_resumes_exactly(service: Service) -> None:
    expected = service.trained("ddp")
    job_id = service.submit("ddp", sleep=0.1)
    kill_when_past(service, job_id, 15, "trainplane.runtime.driver")
    detail = service.succeeded(job_id)
    assert [a["status"] for a in detail["attempts"]] == ["FAILED", "SUCCEEDED"]
    assert_resumed_exactly(service, job_id, expected)


def test_checkpoints_are_listed_by_the_api(service: Service) -> None:
    job_id = service.uninterrupted_job("ddp")
    listed = service.http.get(f"/v1/jobs/{job_id}/checkpoints").json()
    assert [c["step"] for c in listed["checkpoints"]] == [50, 40]  # keep_last: 2
    assert all(c["strategy"] == "ddp" and c["world_size"] == 2 for c in listed["checkpoints"])
    assert listed["checkpoints"][0]["uri"].endswith(f"/{job_id}/checkpoints/step-50")


def test_an_unmodified_torchrun_script_runs_on_two_workers(service: Service) -> None:
    body = {
        "kind": "train",
        "name": "torchrun-script",
        "entrypoint": {"script": "train.py", "working_dir": str(ROOT / "examples" / "torchrun")},
        "resources": {"gpus": 2},
    }
    job_id = service.http.post("/v1/jobs", json=body).json()["id"]
    service.succeeded(job_id)
    logs = service.logs(job_id)
    assert "world size 2" in logs and "done" in logs


def test_sharded_checkpoints_on_s3_resume_exactly(
    service: Service, s3_endpoint: str, s3_bucket: str
) -> None:
    """A killed Ray Train worker of an FSDP2 job: the per-rank shards went
    through staging folders and uploads; the workers, restarted in place,
    download them and continue as if nothing happened. Ray Train's run state
    and the exported model land in the same bucket."""
    expected = service.trained("fsdp")
    storage = f"s3://{s3_bucket}/ckpt"
    # A job's storage must lie under its project's root: here, the bucket.
    rooted = service.http.patch("/v1/projects/default", json={"storage": f"s3://{s3_bucket}"})
    assert rooted.status_code == 200, rooted.text
    try:
        job_id = service.submit(
            "fsdp",
            sleep=0.1,
            checkpoint={"every_steps": 10, "keep_last": 2, "storage": storage},
            register_model={"name": "mlp-on-s3"},
        )
    finally:
        service.http.patch("/v1/projects/default", json={"storage": None})
    body = service.job(job_id)["spec"]
    assert body["checkpoint"]["storage"] == storage
    kill_when_past(service, job_id, 15, "RayTrainWorker")
    detail = service.succeeded(job_id)
    assert len(detail["attempts"]) == 1  # Ray Train restarted the workers in place
    assert_resumed_exactly(service, job_id, expected)
    listed = service.http.get(f"/v1/jobs/{job_id}/checkpoints").json()["checkpoints"]
    assert [c["uri"] for c in listed] == [
        f"{storage}/default/{job_id}/checkpoints/step-{step}" for step in (50, 40)
    ]
    job_root = f"ckpt/default/{job_id}"
    pages = s3_client().get_paginator("list_objects_v2").paginate(Bucket=s3_bucket)
    keys = [
        entry["Key"]
        for page in pages
        for entry in page.get("Contents", [])
        # pyarrow marks the folders it creates with empty "folder/" objects.
        if not entry["Key"].endswith("/")
    ]
    assert all(key.startswith(f"{job_root}/") for key in keys), keys
    folders = {key.removeprefix(f"{job_root}/").split("/")[0] for key in keys}
    assert folders == {"checkpoints", "model", "ray-train"}, folders
    # The attempt's Ray Train run kept its state there.
    runs = {key.split("/")[4] for key in keys if key.startswith(f"{job_root}/ray-train/")}
    assert runs == {f"trainplane-{detail['attempts'][0]['id']}"}, runs
    assert any(key.startswith(f"{job_root}/model/") for key in keys)


# --- preemption ----------------------------------------------------------------------


def _submit_command(
    service: Service, name: str, code: str, *, env: dict[str, str] | None = None, **spec: Any
) -> str:
    body = {
        "kind": "train",
        "name": name,
        "entrypoint": {"command": ["python", "-c", code], "env": env or {}},
        "resources": {"gpus": 2},
        **spec,
    }
    answer = service.http.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def _events(service: Service, job_id: str) -> list[dict[str, Any]]:
    return service.http.get(f"/v1/jobs/{job_id}/events", params={"limit": 200}).json()["items"]


def _attempt_log(service: Service, job_id: str, number: int) -> str:
    return service.http.get(f"/v1/jobs/{job_id}/logs", params={"attempt": number}).text


def test_a_high_priority_job_preempts_a_low_one_which_checkpoints_and_resumes_exactly(
    service: Service,
) -> None:
    expected = service.trained("ddp")
    # No restarts allowed: a preemption must not count as a failure.
    low = service.submit(
        "ddp", sleep=0.2, priority="low", retries={"max_restarts": 0, "backoff_seconds": 0}
    )
    wait_for(
        lambda: (done := service.losses(low)) and max(done) >= 13,
        120,
        "the low job to train past its first checkpoint",
    )
    high = _submit_command(service, "urgent", "print('the urgent job ran')", priority="high")

    low_done = service.succeeded(low)
    high_done = service.succeeded(high)

    first, second = low_done["attempts"]
    preemptor = f"job {high} (high priority, project default)"
    assert (first["status"], first["reason"]) == ("STOPPED", f"preempted by {preemptor}")
    assert second["status"] == "SUCCEEDED"
    # The stopped attempt's GPU time counts as lost (an upper bound: most of
    # it was kept in the checkpoint).
    assert 0 < low_done["lost_gpu_hours"] < low_done["gpu_hours"]
    # The runtime saved a checkpoint when asked, at whatever step it was, and
    # the next attempt resumed from exactly that one.
    stopped = re.search(
        r"preempted; stopping after the checkpoint at step (\d+)", _attempt_log(service, low, 1)
    )
    assert stopped, _attempt_log(service, low, 1)[-3000:]
    at = int(stopped.group(1))
    assert at >= 13
    assert f"resumed from checkpoint step {at} " in _attempt_log(service, low, 2)
    assert_resumed_exactly(service, low, expected)
    assert service.losses(low)[STEPS] == expected[STEPS]  # the same final loss

    # The preemptor started only once the GPUs were free, and the histories
    # name each other.
    assert high_done["attempts"][0]["started_at"] >= first["finished_at"]
    low_reasons = [e["reason"] for e in _events(service, low)]
    assert any(r.startswith(f"preemption: job {high} (high priority") for r in low_reasons)
    assert f"preempted by {preemptor}; back in the queue, resumes from its latest checkpoint" in (
        low_reasons
    )
    high_reasons = [e["reason"] for e in _events(service, high)]
    assert any(r.startswith(f"preempting job {low} (low priority") for r in high_reasons)


def test_a_preempted_job_that_does_not_stop_by_itself_is_stopped_after_the_grace_period(
    service: Service,
) -> None:
    """A plain script never hears of the request: the cluster stops it when
    the grace period is over, and it goes back to the queue all the same."""
    low = _submit_command(
        service,
        "stubborn",
        "import time; print('busy', flush=True); time.sleep(600)",
        priority="low",
    )
    wait_for(lambda: service.job(low)["status"] == "RUNNING", 120, "the low job to run")
    asked_at = time.monotonic()
    high = _submit_command(service, "urgent", "print('the urgent job ran')", priority="high")
    try:
        service.succeeded(high)
        waited = time.monotonic() - asked_at
        detail = service.job(low)
        first = detail["attempts"][0]
        assert first["status"] == "STOPPED"
        assert first["reason"] == f"preempted by job {high} (high priority, project default)"
        assert waited >= PREEMPTION_GRACE_SECONDS - 1  # it was given the whole grace period
        reasons = [e["reason"] for e in _events(service, low)]
        assert any(
            f"asked to checkpoint and stop within {PREEMPTION_GRACE_SECONDS}s" in r for r in reasons
        )
        # Back in the queue, then running again once the urgent job is done.
        wait_for(lambda: len(service.job(low)["attempts"]) == 2, 120, "a second attempt")
    finally:
        service.http.post(f"/v1/jobs/{low}/cancel")
    assert service.wait(low)["status"] == "CANCELLED"


def test_workers_the_cluster_cannot_place_fail_the_attempt_saying_why(
    service: Service, ray_head: LocalRayHead
) -> None:
    """Something trainplane did not start holds the slots the scheduler counts
    as free. Both kinds of gang (Ray Train's, for a function; trainplane's
    own, for a command) wait their start timeout, then the attempt fails with
    that reason: before, Ray Train retried forever and the job sat RUNNING."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    ray = JobSubmissionClient(ray_head.address)
    squatter = ray.submit_job(entrypoint="sleep 600", entrypoint_num_cpus=2)
    try:
        wait_for(
            lambda: ray.get_job_status(squatter) == JobStatus.RUNNING, 60, "the squatter to run"
        )
        quick_start = {"RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "5"}
        no_restarts = {"max_restarts": 0, "backoff_seconds": 0}
        function_job = service.submit("ddp", env=quick_start, retries=no_restarts)
        function_detail = service.wait(function_job, timeout=180)
        command_job = _submit_command(
            service, "placed-never", "print('the rank ran')", env=quick_start, retries=no_restarts
        )
        command_detail = service.wait(command_job, timeout=180)
    finally:
        ray.stop_job(squatter)
        wait_for(lambda: ray.get_job_status(squatter).is_terminal(), 30, "the squatter to stop")
    for detail in (function_detail, command_detail):
        assert detail["status"] == "FAILED", detail
        assert "the cluster did not place the 2 workers within 5s" in detail["reason"], detail
    assert "] the rank ran" not in _attempt_log(service, command_job, 1)  # no rank started
