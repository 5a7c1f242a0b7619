"""How a script's ranks publish one checkpoint (runtime.script_checkpoints):
rank processes on one node and on two simulated nodes (a sync folder and a
checkpoint folder each) publishing to a local folder and to S3 (moto's
server), and the protocol's rules, with each rank's publisher on a thread of
its own: retention, who did not arrive, conflicting files, symlinks, records
of another attempt, a node whose upload failed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from trainplane.jobs.spec import Checkpoint, KeepBest
from trainplane.runtime import env as tp_env
from trainplane.runtime.script_checkpoints import (
    PUBLISHING,
    Placement,
    Publisher,
    PublishTimeout,
)
from trainplane.storage import checkpoints as layout
from trainplane.storage.backends import LocalStorage, Storage, StorageError, open_storage

pytestmark = pytest.mark.ray_free

ATTEMPT = "attempt-1"

# A rank of a script: its own shard and a file every rank writes alike.
RANK_PROGRAM = """
import json, os
from trainplane import script
folder = script.checkpoint_dir()
rank = int(os.environ["RANK"])
os.makedirs(os.path.join(folder, "shards"), exist_ok=True)
with open(os.path.join(folder, "shards", f"rank-{rank}.pt"), "wb") as shard:
    shard.write(bytes([rank]) * (1000 + rank))
with open(os.path.join(folder, "config.json"), "w") as config:
    config.write('{"hidden": 8}')
script.report({"loss": 0.25, "note": "not a number"}, 3)
uri = script.checkpoint(3)
print(json.dumps({"rank": rank, "uri": uri, "left": os.listdir(folder)}))
"""


@pytest.fixture(params=["local", "s3"])
def storage_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "storage")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/project/job/checkpoints"


def _placements(nodes: tuple[int, ...]) -> list[Placement]:
    """Ranks numbered node by node, as torchrun does; ``nodes``: ranks per node."""
    world = sum(nodes)
    placements = []
    for node, count in enumerate(nodes):
        for local in range(count):
            placements.append(
                Placement(
                    rank=len(placements),
                    local_rank=local,
                    world_size=world,
                    local_world_size=count,
                    node=node,
                    nodes=len(nodes),
                )
            )
    return placements


@pytest.mark.parametrize(
    ("where", "nodes"), [("local", (3,)), ("s3", (2, 1))], ids=["local-one-node", "s3-two-nodes"]
)
def test_rank_processes_publish_one_complete_checkpoint_with_every_ranks_files(
    where: str, nodes: tuple[int, ...], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    storage_uri = (
        str(tmp_path / "storage")
        if where == "local"
        else f"s3://{request.getfixturevalue('s3_bucket')}/project/job/checkpoints"
    )
    processes = []
    for placement in _placements(nodes):
        node = tmp_path / f"node-{placement.node}"
        env = {
            **os.environ,
            "RANK": str(placement.rank),
            "LOCAL_RANK": str(placement.local_rank),
            "WORLD_SIZE": str(placement.world_size),
            "LOCAL_WORLD_SIZE": str(placement.local_world_size),
            "GROUP_RANK": str(placement.node),
            tp_env.NODES: str(placement.nodes),
            tp_env.CHECKPOINT_URI: storage_uri,
            tp_env.CHECKPOINT_DIR: str(node / "checkpoints"),
            tp_env.SYNC_DIR: str(node / ".sync"),
            tp_env.ATTEMPT_ID: ATTEMPT,
            tp_env.JOB_ID: "job-1",
            tp_env.SPEC: json.dumps(
                {
                    "kind": "train",
                    "name": "s",
                    "entrypoint": {"script": "train.py"},
                    "strategy": {"type": "fsdp"},
                }
            ),
        }
        processes.append(
            subprocess.Popen(
                [sys.executable, "-c", RANK_PROGRAM],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    assert all(process.returncode == 0 for process in processes), outputs
    results = {r["rank"]: r for r in (json.loads(out.splitlines()[-1]) for out in outputs)}

    storage = open_storage(storage_uri)
    (found,) = layout.scan(storage)
    assert found.complete, found.problem
    assert results[0]["uri"] == found.uri
    assert all(results[rank]["uri"] is None for rank in (1, 2))
    manifest = found.manifest
    assert manifest is not None
    assert (manifest.step, manifest.world_size, manifest.format) == (3, 3, "files")
    assert (manifest.strategy, manifest.attempt_id, manifest.job_id) == ("fsdp", ATTEMPT, "job-1")
    assert manifest.metrics == {"loss": 0.25}  # rank 0's last report
    sizes = {entry.path: entry.size for entry in manifest.files}
    assert sizes == {
        "config.json": 13,
        "shards/rank-0.pt": 1000,
        "shards/rank-1.pt": 1001,
        "shards/rank-2.pt": 1002,
    }
    local = tmp_path / "read-back"
    storage.get_tree(found.name, local)
    assert (local / "shards" / "rank-2.pt").read_bytes() == bytes([2]) * 1002
    # The default folder is emptied on every node; the records are gone.
    assert all(result["left"] == [] for result in results.values())
    assert not storage.sizes(PUBLISHING)
    assert "trainplane: checkpoint step 3 saved (4 files" in outputs[0]


# --- the protocol's rules, one thread per rank -------------------------------------


class Gang:
    """A publisher per rank, on ``storage``: ``nodes`` says how many ranks
    each node has; every node has its own checkpoint and sync folders."""

    def __init__(
        self,
        storage: Storage,
        root: Path,
        nodes: tuple[int, ...],
        *,
        policy: Checkpoint | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.storage = storage
        self.lines: list[str] = []
        self.publishers = [
            Publisher(
                storage=storage,
                sync_dir=root / f"node-{placement.node}" / ".sync",
                placement=placement,
                policy=policy or Checkpoint(keep_last=10),
                strategy="ddp",
                attempt_id=ATTEMPT,
                timeout=timeout,
                log=self.lines.append,
            )
            for placement in _placements(nodes)
        ]
        self.folders = [root / f"node-{p.placement.node}" / "checkpoints" for p in self.publishers]

    def save(
        self,
        step: int,
        *,
        write: Callable[[int, Path], None] | None = None,
        ranks: list[int] | None = None,
        metrics: dict[str, float] | None = None,
        empty_after: bool = True,
    ) -> list[Any]:
        """Every rank in ``ranks`` (default: all) writes its files, then
        publishes; each one's result, or the exception it raised."""

        def rank_saves(rank: int) -> Any:
            folder = self.folders[rank]
            folder.mkdir(parents=True, exist_ok=True)
            (write or _own_shard)(rank, folder)
            try:
                return self.publishers[rank].publish(
                    step, folder, metrics=metrics or {}, empty_after=empty_after
                )
            except Exception as exc:
                return exc

        chosen = range(len(self.publishers)) if ranks is None else ranks
        with ThreadPoolExecutor(len(self.publishers)) as pool:
            return list(pool.map(rank_saves, chosen))


def _own_shard(rank: int, folder: Path) -> None:
    (folder / f"rank-{rank}.bin").write_bytes(b"x" * (10 + rank))


def _complete_steps(storage: Storage) -> list[int]:
    return [folder.step for folder in layout.complete_checkpoints(storage)]


def test_keep_last_leaves_the_newest(storage_uri: str, tmp_path: Path) -> None:
    storage = open_storage(storage_uri)
    gang = Gang(storage, tmp_path, (2,), policy=Checkpoint(keep_last=2))
    for step in (1, 2, 3, 4):
        assert gang.save(step)[0] == f"{storage.uri}/step-{step}"
    assert _complete_steps(storage) == [3, 4]


def test_keep_best_keeps_the_best_by_the_metric_saved_with_it(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "storage")
    policy = Checkpoint(keep_last=1, keep_best=KeepBest(metric="loss", mode="min"))
    gang = Gang(storage, tmp_path, (1, 1), policy=policy)
    for step, loss in ((1, 0.5), (2, 0.1), (3, 0.4), (4, 0.3)):
        gang.save(step, metrics={"loss": loss})
    assert _complete_steps(storage) == [2, 4]


def test_a_rank_that_never_arrives_is_named(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "storage")
    gang = Gang(storage, tmp_path, (3,), timeout=0.5)
    (error,) = gang.save(1, ranks=[0])
    assert isinstance(error, PublishTimeout)
    assert "local ranks 1, 2 of node 0 did not call checkpoint(1) within 0.5 s" in str(error)
    assert _complete_steps(storage) == []


def test_a_node_that_never_publishes_is_named_and_a_record_of_another_attempt_is_not_merged(
    tmp_path: Path,
) -> None:
    storage = LocalStorage(tmp_path / "storage")
    stale = {"attempt_id": "an-earlier-one", "round": 1, "node": 1, "files": []}
    storage.write_bytes(f"{PUBLISHING}/step-1/node-1.json", json.dumps(stale).encode())
    gang = Gang(storage, tmp_path, (1, 1), timeout=0.5)
    (error,) = gang.save(1, ranks=[0])
    assert isinstance(error, PublishTimeout)
    assert "nodes 1 did not publish their files within 0.5 s" in str(error)
    assert _complete_steps(storage) == []


def test_two_nodes_saving_different_files_under_one_name_are_refused(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "storage")
    gang = Gang(storage, tmp_path, (1, 1))

    def clash(rank: int, folder: Path) -> None:
        (folder / "model.bin").write_bytes(f"rank {rank}".encode())
        (folder / "config.json").write_text("{}")  # the same on both: fine

    error, result = gang.save(1, write=clash)
    assert result is None  # node 1's part went up
    assert isinstance(error, StorageError)
    assert "nodes 0 and 1 saved different files as model.bin" in str(error)
    assert _complete_steps(storage) == []


def test_symlinks_are_not_followed_and_an_explicit_folder_is_left_as_it_is(
    tmp_path: Path,
) -> None:
    storage = LocalStorage(tmp_path / "storage")
    outside = tmp_path / "secret.txt"
    outside.write_text("not for the checkpoint")
    gang = Gang(storage, tmp_path, (1,))

    def with_links(rank: int, folder: Path) -> None:
        _own_shard(rank, folder)
        (folder / "escape").symlink_to(outside)
        (folder / "escape-dir").symlink_to(tmp_path)

    gang.save(1, write=with_links, empty_after=False)
    found = layout.inspect(storage, "step-1")
    assert found is not None and found.manifest is not None
    assert [entry.path for entry in found.manifest.files] == ["rank-0.bin"]
    assert sorted(storage.sizes("step-1")) == ["manifest.json", "rank-0.bin"]
    assert any("escape, escape-dir" in line for line in gang.lines)
    assert sorted(p.name for p in gang.folders[0].iterdir()) == [
        "escape",
        "escape-dir",
        "rank-0.bin",
    ]


def test_saving_a_step_again_replaces_its_checkpoint(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "storage")
    gang = Gang(storage, tmp_path, (2,))
    gang.save(5)

    def bigger(rank: int, folder: Path) -> None:
        (folder / f"rank-{rank}.bin").write_bytes(b"y" * 100)

    gang.save(5, write=bigger)
    found = layout.inspect(storage, "step-5")
    assert found is not None and found.manifest is not None
    assert {entry.size for entry in found.manifest.files} == {100}
    assert "trainplane: replacing the earlier checkpoint step-5" in gang.lines


def test_a_node_whose_upload_failed_fails_its_ranks_with_the_reason(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "storage"
    not_a_folder.write_text("a file where the storage should be")
    gang = Gang(LocalStorage(not_a_folder), tmp_path, (2,), timeout=20)
    first, second = gang.save(1)
    assert isinstance(first, OSError)
    assert isinstance(second, StorageError)
    assert "checkpoint step 1 was not saved: node 0:" in str(second)
