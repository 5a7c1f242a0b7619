"""A sweep's trial pruned at its decision step, end to end: a real
``trainplane server`` runs a 3-trial grid over examples/mlp's learning rate
with ASHA (min_steps 10) on the local Ray cluster. The first trial learns and
runs its 60 fast steps; the two after it barely learn, report step 10 and
wait for the answer there, are told to stop, save and leave: each ends
CANCELLED with the pruner's reason, having reported no step past its rung."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.runtime.test_training import MLP, S3_CREDENTIALS, Service, start_server
from trainplane.backends.local_ray import LocalRayHead

STEPS = 60
MIN_STEPS = 10


@pytest.fixture(scope="module")
def service(
    ray_head: LocalRayHead, s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    home = tmp_path_factory.mktemp("sweep-pruning")
    with start_server(home, ray_head, s3_endpoint) as server:
        yield Service(server.url, home, s3_endpoint)


def sweep(service: Service) -> dict[str, Any]:
    env = {"AWS_ENDPOINT_URL_S3": service.s3_endpoint, **S3_CREDENTIALS}
    return {
        "kind": "sweep",
        "name": "pruned-mlp",
        "trial": {
            "kind": "train",
            "entrypoint": {
                "function": "train:train_loop",
                "working_dir": str(MLP),
                "args": {"steps": STEPS},
                "env": env,
            },
            "resources": {"gpus": 1},
            "retries": {"max_restarts": 1, "backoff_seconds": 0},
        },
        # In this order: one that learns, then two that barely move.
        "parameters": {"entrypoint.args.lr": {"values": [0.01, 1e-6, 2e-6]}},
        "objective": {"metric": "loss", "mode": "min"},
        "search": {"algorithm": "grid", "trials": 3, "parallel": 1},
        "early_stop": {"algorithm": "asha", "min_steps": MIN_STEPS, "reduction_factor": 3},
    }


def test_a_fast_trial_is_pruned_at_its_decision_step(service: Service) -> None:
    created = service.http.post("/v1/jobs", json=sweep(service))
    assert created.status_code == 201, created.text
    sweep_id = created.json()["id"]
    done = service.wait(sweep_id, timeout=300)
    assert done["status"] == "SUCCEEDED", done.get("reason")
    # Trials are jobs named after their sweep and number.
    listed = service.http.get("/v1/jobs", params={"limit": 100}).json()["items"]
    named = {job["name"]: job for job in listed}
    first, *behind = (named[f"pruned-mlp-{number}"] for number in (1, 2, 3))
    assert first["status"] == "SUCCEEDED"
    assert max(service.losses(first["id"])) == STEPS
    for trial in behind:
        job = service.job(trial["id"])
        log = service.logs(trial["id"])
        assert job["status"] == "CANCELLED", log[-3000:]
        assert job["reason"].startswith(f"pruned at rung 0 (step {MIN_STEPS}): loss"), job
        # Stopped at the step it was judged at, however fast it ran.
        assert max(service.losses(trial["id"])) < 2 * MIN_STEPS, log[-3000:]
        (attempt,) = job["attempts"]  # not retried
        assert (attempt["status"], attempt["reason"]) == ("STOPPED", "pruned")
        assert "pruned by its sweep" in log, log[-3000:]
    assert done["best_trial"]["id"] == first["id"]
