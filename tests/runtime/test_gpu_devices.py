"""Device assignment on a Ray head that declares 4 GPUs (Ray hands out
CUDA_VISIBLE_DEVICES without real ones): both kinds of gang follow torchrun's
rule, every rank of a node sees the node's gang GPUs in local-rank order and
LOCAL_RANK picks its own; a Ray Train worker opens no process group of its
own; and every rank's line reaches the job's log.

One head for the module, shared by its tests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import local_ray_head
from tests.factories import small_spec
from tests.scheduler.conftest import wait_for
from trainplane.backends.local_ray import LocalRayHead
from trainplane.backends.ray import RayCluster
from trainplane.ids import new_id
from trainplane.jobs.spec import parse_spec
from trainplane.scheduler.launch import launch_request

GPUS = 4
PROBE = Path(__file__).with_name("ray_train_devices_probe.py")
PRINT_DEVICES = (
    "import os; print('DEV', os.environ['RANK'], os.environ['LOCAL_RANK'], "
    "os.environ.get('CUDA_VISIBLE_DEVICES'), flush=True)"
)


@pytest.fixture(scope="module")
def gpu_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayHead]:
    with local_ray_head(tmp_path_factory, slots=GPUS, gpus=GPUS) as head:
        yield head


def test_a_command_gangs_ranks_see_their_nodes_gpus_and_each_line_reaches_the_log(
    gpu_head: LocalRayHead, tmp_path: Path
) -> None:
    """The attempt as the scheduler launches it (runtime_env included) on a
    4-GPU cluster: each rank prints one line that differs from the others'
    only in numbers, which Ray would fold into one "[repeated 3x]"."""
    spec = parse_spec(
        small_spec(
            "gpu-mapping",
            entrypoint={"command": ["python", "-c", PRINT_DEVICES]},
            resources={"gpus": GPUS, "gpus_per_node": GPUS, "cpus_per_worker": 1},
        )
    )
    attempt = new_id()
    request = launch_request(
        job_id=new_id(),
        attempt_id=attempt,
        restarts_used=0,
        spec=spec,
        accelerator="H100",
        control_plane_url=None,
        attempt_token="t" * 64,
        checkpoint_dir=str(tmp_path / "checkpoints"),
        model_dir=str(tmp_path / "model"),
    )
    cluster = RayCluster(gpu_head.address)
    assert cluster.submit(
        attempt,
        entrypoint=request.entrypoint,
        runtime_env=request.runtime_env,
        entrypoint_resources=request.entrypoint_resources,
        metadata=request.metadata,
    )
    state = wait_for(
        lambda: (s := cluster.state(attempt)) is not None and s.ended and s, 240, "the job"
    )
    log = cluster.logs(attempt) or ""
    assert state.status == "SUCCEEDED", log[-2000:]
    rows = re.findall(r"\[rank (\d)\] DEV (\d) (\d) (\S+)", log)
    assert sorted(r[0] for r in rows) == ["0", "1", "2", "3"], log[-2000:]
    assert sorted(r[2] for r in rows) == ["0", "1", "2", "3"]  # one node: local = global
    lists = {r[3] for r in rows}
    # One list for the node, of 4 distinct GPUs, numbered as nvidia-smi does.
    assert lists == {"0,1,2,3"}, rows


def test_ray_train_workers_hand_their_ranks_the_nodes_gpus_without_a_process_group(
    gpu_head: LocalRayHead, tmp_path: Path
) -> None:
    """The Ray Train worker group as the runtime builds it: no torch process
    group (with NCCL: a communicator and a CUDA context per GPU) in the
    workers, each rank process sees the node's GPUs with its own at
    LOCAL_RANK, and the run starts no actor it does not need."""
    out = tmp_path / "ranks"
    out.mkdir()
    env = {
        **os.environ,
        "RAY_ADDRESS": f"127.0.0.1:{gpu_head.gcs_port}",
        "TRAINPLANE_CHECKPOINT_URI": str(tmp_path / "checkpoints"),
    }
    run = subprocess.run(
        [sys.executable, str(PROBE), str(GPUS), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ranks = [json.loads((out / f"{r}.json").read_text()) for r in range(GPUS)]
    assert not any(r["process_group"] for r in ranks), ranks
    assert not any(r["cuda_initialized"] for r in ranks), ranks
    assert {r["visible"] for r in ranks} == {"0,1,2,3"}, ranks
    assert sorted(r["local_rank"] for r in ranks) == [0, 1, 2, 3]
    for r in ranks:
        # cuda:LOCAL_RANK is the GPU Ray gave this rank's worker.
        assert r["visible"].split(",")[r["local_rank"]] == r["own"][0], r
    assert len({tuple(r["master"]) for r in ranks}) == 1
    # Ray Train's workers, without the dataset manager, the placement-group
    # cleaner and a controller actor: the controller runs in the driver's
    # process (runtime.lean_trainer).
    actors = set(json.loads((out / "actors.json").read_text()))
    assert "RayTrainWorker" in actors, actors
    assert not actors & {"DatasetManager", "PlacementGroupCleaner", "TrainController"}, actors
