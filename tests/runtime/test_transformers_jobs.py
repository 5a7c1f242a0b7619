"""examples/trl-sft (TRL's ``SFTTrainer``, a LoRA adapter, trainplane's
Transformers callback) as a job of a real ``trainplane server`` on the local
Ray cluster (2 CPU workers, gloo).

The example's job.yaml with only ``strategy.type`` changed (as ``--set``
does). Under ZeRO-2 one job shows it all: each rank's optimizer shard is in
the one published checkpoint; a rank killed past the first checkpoint fails
the attempt, and the next one resumes from the latest published checkpoint
(its log names the step, its metrics continue after it); a high-priority job
then preempts it: it saves, exits 0, and the third attempt resumes from that
save, finishes, and its adapter is registered. A short second job trains
under FSDP2. (The example as it is, under DDP, runs in the acceptance check.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.runtime.test_lightning_jobs import checkpoints, resumed_at
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
from trainplane.storage import checkpoints as layout
from trainplane.storage.backends import open_storage

pytestmark = pytest.mark.cluster

EXAMPLE = ROOT / "examples" / "trl-sft"
STEPS = 40
EVERY = 5  # the example logs every 5 steps; here it checkpoints as often
MODEL = "trl-sft-arithmetic"  # the example's register_model


@pytest.fixture(scope="module")
def service(
    ray_head: LocalRayHead, s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    home = tmp_path_factory.mktemp("transformers")
    with start_server(home, ray_head, s3_endpoint, **PREEMPTION) as server:
        yield Service(server.url, home, s3_endpoint)


def submit(service: Service, args: dict[str, Any], **fields: Any) -> str:
    """The example's job.yaml as a user submits it, at low priority, its
    entrypoint.args and any top-level ``fields`` changed (as ``--set`` does)."""
    body = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    body["entrypoint"].update(working_dir=str(EXAMPLE), args=args)
    answer = service.http.post("/v1/jobs", json={**body, "priority": "low", **fields})
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


@pytest.mark.timeout(600)  # three attempts of a two-rank job, each starting its ranks
def test_the_trl_example_under_zero_2_resumes_after_a_lost_rank_and_a_preemption(
    service: Service,
) -> None:
    every_5 = {"every_steps": EVERY, "keep_last": 2}
    args = {"max_steps": STEPS, "step_sleep": 0.4}
    job_id = submit(service, args, strategy={"type": "deepspeed"}, checkpoint=every_5)

    kill_when_past(service, job_id, 8, "train.py")  # a rank, past the first checkpoint
    before_kill = checkpoints(service, job_id)[0]["step"]
    wait_for(
        lambda: (
            len(service.job(job_id)["attempts"]) == 2
            and max(service.losses(job_id)) >= before_kill + 2 * EVERY
        ),
        240,
        "the second attempt to train on",
    )
    urgent = _submit_command(service, "urgent", "print('the urgent job ran')", priority="high")
    detail = service.succeeded(job_id)
    service.succeeded(urgent)

    statuses = [attempt["status"] for attempt in detail["attempts"]]
    assert statuses == ["FAILED", "STOPPED", "SUCCEEDED"], detail["attempts"]
    assert detail["attempts"][1]["reason"].startswith(f"preempted by job {urgent}")
    logs = [_attempt_log(service, job_id, number) for number in (1, 2, 3)]
    assert resumed_at(logs[1]) == before_kill
    asked = re.search(r"stopping after the checkpoint at step (\d+)", logs[1])
    assert asked and "trainplane: stopped for preemption" in logs[1], logs[1][-3000:]
    preempted_at = int(asked.group(1))
    assert before_kill < preempted_at < STEPS
    assert resumed_at(logs[2]) == preempted_at

    # The loss every 5 steps, each attempt's from just after the checkpoint
    # it resumed from; the Trainer's summary comes last, at the last step.
    losses: dict[int, list[int]] = {1: [], 2: [], 3: []}
    for point in points(service, job_id):
        if "loss" in point["metrics"]:
            losses[point["attempt"]].append(point["step"])
    assert losses[2][0] == before_kill + EVERY, losses
    assert losses[3][0] == (preempted_at // EVERY + 1) * EVERY, losses
    assert losses[2] == sorted(losses[2]) and losses[3] == sorted(losses[3]), losses
    assert sorted({step for steps in losses.values() for step in steps}) == list(
        range(EVERY, STEPS + 1, EVERY)
    )
    assert points(service, job_id)[-1]["step"] == STEPS

    listed = checkpoints(service, job_id)
    assert [c["step"] for c in listed] == [STEPS, STEPS - EVERY]  # keep_last: 2
    assert all(c["strategy"] == "deepspeed" and c["world_size"] == 2 for c in listed)
    storage = service.http.get(f"/v1/jobs/{job_id}/checkpoints").json()["storage"]
    found = layout.complete_checkpoints(open_storage(storage))
    manifest = next(f.manifest for f in found if f.step == STEPS)
    assert manifest is not None
    paths = {entry.path for entry in manifest.files}
    # ZeRO-2 partitions the optimizer state: one shard per rank, one checkpoint.
    shards = {p for p in paths if re.search(r"zero_pp_rank_\d+_mp_rank_00_optim_states", p)}
    assert len(shards) == 2, sorted(paths)
    assert {"adapter_model.safetensors", "trainer_state.json"} <= paths

    registered = wait_for(
        lambda: service.job(job_id).get("registered_model"), 120, "the adapter's registration"
    )
    assert registered["name"] == MODEL


def test_the_trl_example_trains_under_fsdp2_chosen_by_strategy_type_alone(
    service: Service,
) -> None:
    """On CPU workers too: Accelerate, which enables FSDP for GPU worlds only,
    is told this one may shard (integrations.hf_arguments)."""
    every_5 = {"every_steps": EVERY, "keep_last": 2}
    job_id = submit(service, {"max_steps": 10}, strategy={"type": "fsdp"}, checkpoint=every_5)
    service.succeeded(job_id)
    assert "Accelerate runs this Trainer as" not in service.logs(job_id)
    listed = checkpoints(service, job_id)
    assert [c["step"] for c in listed] == [10, 5]
    assert all(c["strategy"] == "fsdp" and c["world_size"] == 2 for c in listed)
    storage = service.http.get(f"/v1/jobs/{job_id}/checkpoints").json()["storage"]
    latest = layout.latest_complete(open_storage(storage))
    manifest = latest.manifest if latest is not None else None
    assert manifest is not None and manifest.step == 10
    # The Trainer's FSDP checkpoint: the model and optimizer gathered by FSDP.
    assert {"pytorch_model_fsdp.bin", "optimizer.bin"} <= {e.path for e in manifest.files}


def points(service: Service, job_id: str) -> list[dict[str, Any]]:
    page = service.http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10_000}).json()
    return page["points"]
