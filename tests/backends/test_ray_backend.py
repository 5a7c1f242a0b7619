"""The Ray Jobs API wrapper, against a real local Ray head and against hosts
that refuse connections or never answer."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from trainplane.backends.ray import (
    ClusterUnreachable,
    LaunchRejected,
    RayCluster,
    _client_error,
    strip_ansi,
)
from trainplane.net import free_port


def test_http_status_classification():
    assert _client_error("Request failed with status code 400: bad runtime_env")
    assert not _client_error("Request failed with status code 500: No available agent")
    assert not _client_error("connection reset")


def test_strip_ansi():
    assert strip_ansi("\x1b[36m(RankWorker pid=1)\x1b[0m hello") == "(RankWorker pid=1) hello"


def test_a_refused_connection_is_unreachable_at_once():
    cluster = RayCluster(f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(ClusterUnreachable):
        cluster.state("anything")
    assert time.monotonic() - started < 2


def test_a_host_that_never_answers_times_out():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # accepts connections, never answers
    port = silent.getsockname()[1]
    try:
        cluster = RayCluster(f"http://127.0.0.1:{port}", connect_timeout=1, read_timeout=1)
        started = time.monotonic()
        with pytest.raises(ClusterUnreachable):
            cluster.state("anything")
        assert time.monotonic() - started < 5
    finally:
        silent.close()


WORKER_NICENESS = (
    "import os, ray; ray.init(); "
    "print(42, ray.get(ray.remote(num_cpus=0)(lambda: os.nice(0)).remote()))"
)


def test_submit_is_idempotent_by_submission_id(ray_head):
    cluster = RayCluster(ray_head.address)
    submission_id = f"tp-backend-{time.time_ns()}"
    launch = {
        # And the niceness of a Ray worker of the job (Ray's default is 15,
        # which the ranks a Ray Train worker starts would inherit).
        "entrypoint": f"python -c '{WORKER_NICENESS}'",
        "runtime_env": {},
        "entrypoint_resources": {},
        "metadata": {},
    }
    assert cluster.submit(submission_id, **launch) is True
    assert cluster.submit(submission_id, **launch) is False
    deadline = time.monotonic() + 60
    while (state := cluster.state(submission_id)) and not state.ended:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert (state.status, state.exit_code) == ("SUCCEEDED", 0)
    assert "42 0" in cluster.logs(submission_id)


def test_unknown_jobs(ray_head):
    cluster = RayCluster(ray_head.address)
    assert cluster.state("no-such-job") is None
    assert cluster.logs("no-such-job") is None
    cluster.stop("no-such-job")  # already as stopped as it gets


def test_a_request_ray_cannot_take_is_rejected(ray_head):
    cluster = RayCluster(ray_head.address)
    with pytest.raises(LaunchRejected):
        cluster.submit(
            "tp-bad-env",
            entrypoint="true",
            runtime_env={"pip": 5},
            entrypoint_resources={},
            metadata={},
        )


def test_clients_are_shared_across_threads(ray_head):
    cluster = RayCluster(ray_head.address)
    errors = []

    def look():
        try:
            assert cluster.state("no-such-job") is None
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=look) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
