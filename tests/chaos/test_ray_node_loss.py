"""Losing part of a Ray cluster during training: one process of a worker
node, then the whole node. The cluster is a head and a second node joined to
it with ``ray start --address``, one worker slot each, so a two-rank job has
a rank on each. The job resumes from its last complete checkpoint either way."""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.chaos.conftest import server_env
from tests.conftest import local_ray_head
from tests.runtime.test_training import STEPS, Service, reference_losses
from tests.scheduler.conftest import wait_for
from trainplane.backends.local_ray import LocalRayHead
from trainplane.testing.clusters import register_local_cluster
from trainplane.testing.processes import attempt_processes
from trainplane.testing.ray_nodes import LocalRayWorkerNode
from trainplane.testing.server import ServerProcess

pytestmark = pytest.mark.postgres_only


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayHead]:
    with local_ray_head(tmp_path_factory, slots=1) as head:
        yield head


@pytest.fixture(scope="module")
def worker_node(head: LocalRayHead) -> Iterator[LocalRayWorkerNode]:
    """The second node, shared by the tests of this module; a test that kills
    it starts it again (a new node in its place)."""
    # Ray keeps unix sockets under the node's folder: a short path.
    state = Path(tempfile.mkdtemp(prefix="tp-node-", dir="/tmp"))
    node = LocalRayWorkerNode(head, slots=1, state_dir=state).start()
    yield node
    node.kill()
    shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def service(db_url: str, head: LocalRayHead, s3_endpoint: str, tmp_path: Path) -> Iterator[Service]:
    register_local_cluster(db_url, head.address, slots=2, slots_per_node=1)
    home = tmp_path / "home"
    with ServerProcess(server_env(db_url, home), log_path=tmp_path / "server.log") as server:
        yield Service(server.url, home, s3_endpoint)


def training_past_step_15(service: Service, tmp_path: Path) -> tuple[str, dict[int, float]]:
    """A two-rank DDP job that has trained past step 15 (checkpoints every
    10), and the losses a one-process run of the same training reports."""
    reference = reference_losses(tmp_path)
    job_id = service.submit("ddp", sleep=0.1)

    def far_enough() -> bool:
        assert not service.job(job_id)["terminal"], service.logs(job_id)[-3000:]
        done = service.losses(job_id)
        return bool(done) and max(done) >= 15

    wait_for(far_enough, 180, "step 15")
    return job_id, reference


def complete_checkpoints(service: Service, job_id: str) -> list[int]:
    listed = service.http.get(f"/v1/jobs/{job_id}/checkpoints").json()["checkpoints"]
    return sorted(c["step"] for c in listed)


def assert_resumed_from(service: Service, job_id: str, step: int, reference: dict) -> None:
    """The job logged resuming from ``step``, reported every later step, and
    trained as the one-process reference does (DDP matches it to 1e-3)."""
    logs = service.logs(job_id)
    resumed = re.findall(r"\[rank 0\] trainplane: resumed from checkpoint step (\d+)", logs)
    assert resumed == [str(step)], logs[-3000:]
    losses = service.losses(job_id)
    assert set(range(step + 1, STEPS + 1)) <= set(losses)
    for later in range(step + 1, STEPS + 1):
        assert losses[later] == pytest.approx(reference[later], rel=1e-3), later


def on_node(pids: list[int], node: LocalRayWorkerNode) -> list[int]:
    """The processes among ``pids`` that descend from ``node``'s own process
    (a rank forked by the rank pool is its node's, not its worker's, child)."""
    assert node.process is not None
    root = node.process.pid
    return [pid for pid in pids if root in {p.pid for p in psutil.Process(pid).parents()}]


def test_a_killed_process_on_a_worker_node_resumes_from_the_last_checkpoint(
    service: Service, worker_node: LocalRayWorkerNode, tmp_path: Path
) -> None:
    job_id, reference = training_past_step_15(service, tmp_path)
    attempt = service.job(job_id)["attempts"][-1]["id"]
    victims = on_node(attempt_processes(attempt, "trainplane.runtime.local"), worker_node)
    assert len(victims) == 1, "one rank trains on the worker node"
    os.kill(victims[0], signal.SIGKILL)
    saved = complete_checkpoints(service, job_id)
    detail = service.succeeded(job_id)
    assert_resumed_from(service, job_id, saved[-1], reference)
    assert len(detail["attempts"]) == 1  # Ray Train restarted the workers in place


def test_a_lost_worker_node_is_replaced_and_the_job_resumes_from_the_last_checkpoint(
    service: Service, worker_node: LocalRayWorkerNode, tmp_path: Path
) -> None:
    job_id, reference = training_past_step_15(service, tmp_path)
    worker_node.kill()  # the machine is gone, with everything on it
    saved = complete_checkpoints(service, job_id)
    killed_at = time.monotonic()
    # What a cloud's autoscaler does: a new machine joins in its place.
    worker_node.start()
    detail = service.succeeded(job_id)
    assert_resumed_from(service, job_id, saved[-1], reference)
    assert detail["status"] == "SUCCEEDED"
    assert time.monotonic() - killed_at < 240
