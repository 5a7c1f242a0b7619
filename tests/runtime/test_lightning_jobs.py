"""examples/lightning (trainplane's Lightning callback) and examples/accelerate
(an Accelerate loop on trainplane.script) as jobs of a real ``trainplane
server`` on the local Ray cluster (2 CPU workers, gloo).

One Lightning job shows the integration whole: the example trains and
checkpoints on two ranks; a rank killed mid-run fails the attempt, and the
next one resumes from the latest published checkpoint (its log names the
step, its metrics continue after it); a high-priority job then preempts it:
it saves, exits 0, and the third attempt resumes from that save and finishes.
The Accelerate loop uses trainplane.script alone, whose restarts and
preemptions tests/runtime/test_script_jobs.py covers: here it runs once,
uninterrupted, as a user submits it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.runtime.test_training import (
    PREEMPTION,
    ROOT,
    Service,
    _attempt_log,
    _submit_command,
    kill_when_past,
    start_server,
)
from tests.scheduler.conftest import wait_for
from trainplane.backends.local_ray import LocalRayHead

STEPS = 80
# example -> every how many steps it reports its loss
EXAMPLES = {"lightning": 5, "accelerate": 1}


@pytest.fixture(scope="module")
def service(
    ray_head: LocalRayHead, s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    home = tmp_path_factory.mktemp("integrations")
    # A generous grace: the test is that the script stops by itself, saying so,
    # however slowly a busy machine lets the interpreter exit.
    grace = {**PREEMPTION, "TRAINPLANE_PREEMPTION_GRACE_SECONDS": "60"}
    with start_server(home, ray_head, s3_endpoint, **grace) as server:
        yield Service(server.url, home, s3_endpoint)


def submit_example(service: Service, name: str, **args: Any) -> str:
    """The example's job.yaml as a user submits it, with ``args`` added, at low
    priority and with one restart."""
    folder = ROOT / "examples" / name
    body = yaml.safe_load((folder / "job.yaml").read_text())
    body["entrypoint"]["working_dir"] = str(folder)
    body["entrypoint"]["args"] = {**body["entrypoint"].get("args", {}), **args}
    body["retries"] = {"max_restarts": 1, "backoff_seconds": 0}
    body["priority"] = "low"
    answer = service.http.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def steps_in_order(service: Service, job_id: str) -> list[int]:
    page = service.http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10_000}).json()
    return [point["step"] for point in page["points"]]


def checkpoints(service: Service, job_id: str) -> list[dict[str, Any]]:
    return service.http.get(f"/v1/jobs/{job_id}/checkpoints").json()["checkpoints"]


def resumed_at(log: str) -> int:
    found = re.search(r"resumed from checkpoint step (\d+)", log)
    assert found, log[-3000:]
    return int(found.group(1))


def test_the_accelerate_example_trains_reports_and_checkpoints(service: Service) -> None:
    job_id = submit_example(service, "accelerate", max_steps=30)
    service.succeeded(job_id)
    assert steps_in_order(service, job_id) == list(range(1, 31))
    listed = checkpoints(service, job_id)
    assert [c["step"] for c in listed] == [30, 20]
    assert all(c["world_size"] == 2 and c["format"] == "files" for c in listed), listed


@pytest.mark.timeout(600)  # three attempts of a two-rank job, each starting its ranks
def test_the_lightning_example_resumes_after_a_lost_rank_and_after_a_preemption(
    service: Service,
) -> None:
    every = EXAMPLES["lightning"]
    job_id = submit_example(service, "lightning", max_steps=STEPS, step_sleep=0.25)

    # A rank killed past the first checkpoint (every 20 steps): the attempt fails.
    kill_when_past(service, job_id, 25, "train.py")
    latest = max(c["step"] for c in checkpoints(service, job_id))
    wait_for(
        lambda: len(service.job(job_id)["attempts"]) == 2 and max(service.losses(job_id)) >= 45,
        240,
        "the second attempt to train past step 45",
    )
    assert resumed_at(_attempt_log(service, job_id, 2)) == latest

    # Preempted: it saves where it is, exits 0 and resumes from that save.
    high = _submit_command(service, "urgent", "print('the urgent job ran')", priority="high")
    detail = service.succeeded(job_id)
    assert service.succeeded(high)
    failed, stopped, finished = detail["attempts"]
    assert failed["status"] == "FAILED"
    assert stopped["status"] == "STOPPED"
    assert stopped["reason"].startswith(f"preempted by job {high}"), stopped
    log = _attempt_log(service, job_id, 2)
    saved = re.search(r"stopping after the checkpoint at step (\d+)", log)
    assert saved and "trainplane: stopped for preemption" in log, log[-3000:]
    assert latest < int(saved.group(1)) < STEPS
    assert resumed_at(_attempt_log(service, job_id, 3)) == int(saved.group(1))
    assert finished["status"] == "SUCCEEDED"

    # The metrics: attempt 1's, then (one step back) attempt 2's from just
    # after its checkpoint, and attempt 3's going on from the preemption's.
    steps = steps_in_order(service, job_id)
    drops = [i for i in range(1, len(steps)) if steps[i] <= steps[i - 1]]
    assert len(drops) == 1, steps
    assert steps[drops[0]] == (latest // every + 1) * every, steps
    assert sorted(set(steps)) == list(range(every, STEPS + 1, every))
    listed = checkpoints(service, job_id)
    assert len(listed) == 2 and listed[0]["step"] == STEPS  # keep_last: 2
    assert all(c["world_size"] == 2 and c["format"] == "files" for c in listed), listed
