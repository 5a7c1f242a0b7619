"""Script jobs written against ``trainplane.script`` on a real ``trainplane
server`` and the local Ray cluster: a two-rank script checkpoints, is killed
and resumes from its latest checkpoint, registers the model it saved; a
second job starts from the first one's checkpoint and, asked to stop for a
preemption, saves, exits 0 and resumes later. (Two jobs in all: each one
costs CI a launch.)
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.test_training import (
    PREEMPTION,
    Service,
    kill_when_past,
    start_server,
)
from tests.scheduler.conftest import wait_for
from trainplane.backends.local_ray import LocalRayHead

pytestmark = pytest.mark.cluster

# The script the jobs run, with entrypoint.args as its flags. Each rank keeps
# its own state file in the checkpoint; "start" in each report says which
# checkpoint the attempt that reported it started from.
SCRIPT = """# trainplane-script-test
import argparse, json, os, sys, time
from trainplane import script
parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int)
parser.add_argument("--sleep", type=float)
parser.add_argument("--save_model", default="false")
args = parser.parse_args()
rank = int(os.environ["RANK"])
resume = script.resume_from()
start = json.load(open(os.path.join(resume, f"state-{rank}.json")))["step"] if resume else 0
print(f"rank {rank} starts after step {start} from {resume}", flush=True)

def save(step):
    with open(os.path.join(script.checkpoint_dir(), f"state-{rank}.json"), "w") as f:
        json.dump({"step": step}, f)
    script.checkpoint(step)

for step in range(start + 1, args.steps + 1):
    script.report({"loss": 1.0 / step, "start": start}, step)
    if step % 10 == 0:
        save(step)
    elif script.should_stop():
        save(step)
        print(f"rank {rank} stopping at step {step}", flush=True)
        sys.exit(0)
    time.sleep(args.sleep)
if rank == 0 and args.save_model == "true":
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=32)
    GPT2LMHeadModel(config).save_pretrained(script.model_dir())
"""


@pytest.fixture(scope="module")
def service(
    ray_head: LocalRayHead, s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    home = tmp_path_factory.mktemp("scripts")
    with start_server(home, ray_head, s3_endpoint, **PREEMPTION) as server:
        yield Service(server.url, home, s3_endpoint)


def _submit(service: Service, name: str, *, gpus: int = 2, **spec: Any) -> str:
    args = spec.pop("args")
    body = {
        "kind": "train",
        "name": name,
        "entrypoint": {"command": ["python", "-c", SCRIPT], "args": args},
        "resources": {"gpus": gpus},
        "checkpoint": {"keep_last": 3, **spec.pop("checkpoint", {})},
        **spec,
    }
    answer = service.http.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def _points(service: Service, job_id: str) -> list[dict[str, Any]]:
    page = service.http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10_000}).json()
    return page["points"]


def _attempt_log(service: Service, job_id: str, number: int) -> str:
    return service.http.get(f"/v1/jobs/{job_id}/logs", params={"attempt": number}).text


def _scratch(attempt_id: str) -> Path:
    return Path(tempfile.gettempdir()) / f"trainplane-{attempt_id}"


def test_a_killed_script_resumes_registers_its_model_and_seeds_a_preempted_job(
    service: Service,
) -> None:
    job_id = _submit(
        service,
        "plain-script",
        args={"steps": 30, "sleep": 0.3, "save_model": True},
        retries={"max_restarts": 1, "backoff_seconds": 0},
        register_model={"name": "plain-script-model"},
    )
    kill_when_past(service, job_id, 15, "trainplane-script-test")
    detail = service.succeeded(job_id)
    assert [a["status"] for a in detail["attempts"]] == ["FAILED", "SUCCEEDED"]
    second_log = _attempt_log(service, job_id, 2)
    storage = service.http.get(f"/v1/jobs/{job_id}/checkpoints").json()["storage"]
    assert f"trainplane: resuming from checkpoint step 10 ({storage}/step-10)" in second_log
    # A local storage: the ranks read the published folder itself.
    for rank in (0, 1):
        assert f"rank {rank} starts after step 10 from {storage}/step-10" in second_log
    points = _points(service, job_id)
    assert sorted(p["step"] for p in points if p["attempt"] == 2) == list(range(11, 31))
    assert {p["metrics"]["start"] for p in points if p["attempt"] == 2} == {10}
    assert {p["step"] for p in points} == set(range(1, 31))
    listed = service.http.get(f"/v1/jobs/{job_id}/checkpoints").json()["checkpoints"]
    assert [c["step"] for c in listed] == [30, 20, 10]  # keep_last: 3
    assert all(c["world_size"] == 2 for c in listed)
    # Each node's scratch folder went with the attempt's ranks (the killed
    # attempt's by the next one's sweep).
    for attempt in detail["attempts"]:
        assert not _scratch(attempt["id"]).exists()

    # A second job starts from the first one's step 20: one worker (run by
    # the driver itself), low priority. It polls should_stop(): when a
    # high-priority job needs the GPUs it saves and exits 0, the attempt ends
    # as preempted, and the next one resumes from that save.
    step20 = next(c for c in listed if c["step"] == 20)["uri"]
    low = _submit(
        service,
        "plain-resumed",
        gpus=1,
        args={"steps": 60, "sleep": 0.2},
        checkpoint={"resume": step20},
        priority="low",
        retries={"max_restarts": 0, "backoff_seconds": 0},
    )
    wait_for(lambda: _points(service, low), 120, "the resumed job to report")
    high = service.http.post(
        "/v1/jobs",
        json={
            "kind": "train",
            "name": "urgent",
            "entrypoint": {"command": ["python", "-c", "print('the urgent job ran')"]},
            "resources": {"gpus": 2},
            "priority": "high",
        },
    ).json()["id"]
    low_done = service.succeeded(low)
    service.succeeded(high)
    first_log = _attempt_log(service, low, 1)
    assert f"trainplane: resuming from checkpoint step 20 ({step20})" in first_log
    first, second = low_done["attempts"]
    assert (first["status"], second["status"]) == ("STOPPED", "SUCCEEDED")
    assert first["reason"] == f"preempted by job {high} (high priority, project default)"
    assert "trainplane: stopped for preemption" in first_log, first_log[-3000:]
    at = int(first_log.split("rank 0 stopping at step ")[1].split()[0])
    assert f"trainplane: resuming from checkpoint step {at} (" in _attempt_log(service, low, 2)
    points = _points(service, low)
    assert sorted(p["step"] for p in points) == list(range(21, 61))  # only after step 20
    assert {p["metrics"]["start"] for p in points if p["attempt"] == 1} == {20}
    assert {p["metrics"]["start"] for p in points if p["attempt"] == 2} == {at}

    # The first job's model, registered once its MLflow run is complete.
    registered = wait_for(
        lambda: service.job(job_id).get("registered_model"), 120, "the model's registration"
    )
    assert (registered["name"], registered["version"]) == ("plain-script-model", "1")
