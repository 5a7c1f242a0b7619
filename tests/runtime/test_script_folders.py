"""Each node's scratch folders for a script's ranks: shared by the node's
ranks, the resume checkpoint fetched once, removed by the last rank out and,
after a gang was killed, by the next attempt on the node."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from trainplane.runtime import env as tp_env
from trainplane.runtime.script_folders import NodeFolders, enter, leave, remove_abandoned
from trainplane.storage.backends import open_storage

# Another supervisor of the same node: enters, says what it got, leaves.
OTHER_RANK = """
import sys
from trainplane.runtime.script_folders import NodeFolders, enter, leave
folders = NodeFolders.for_attempt(sys.argv[1])
env = enter(folders, resume=sys.argv[2] or None, nodes=1)
print(env.get("TRAINPLANE_RESUME_FROM", ""))
leave(folders)
"""


@pytest.fixture
def tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


def _other_rank(attempt: str, resume: str = "") -> str:
    done = subprocess.run(
        [sys.executable, "-c", OTHER_RANK, attempt, resume],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def test_ranks_share_the_node_folders_and_the_last_out_removes_them(tempdir: Path):
    folders = NodeFolders.for_attempt("att1")
    env = enter(folders, resume=None, nodes=2)
    assert folders.root == tempdir / "trainplane-att1"
    assert env == {
        tp_env.CHECKPOINT_DIR: str(folders.root / "checkpoints"),
        tp_env.MODEL_DIR: str(folders.root / "model"),
        tp_env.SYNC_DIR: str(folders.root / ".sync"),
        tp_env.NODES: "2",
    }
    assert all(Path(path).is_dir() for key, path in env.items() if key != tp_env.NODES)
    (folders.model / "config.json").write_text("{}")
    assert _other_rank("att1") == ""  # another rank came and went: the folder stays
    assert (folders.model / "config.json").is_file()
    leave(folders)
    assert not folders.root.exists()


def test_a_local_checkpoint_is_resumed_where_it_was_published(tempdir: Path):
    storage = tempdir / "storage"
    (storage / "step-10").mkdir(parents=True)
    folders = NodeFolders.for_attempt("att2")
    env = enter(folders, resume=f"{storage}/step-10", nodes=1)
    assert env[tp_env.RESUME_FROM] == str(storage / "step-10")
    leave(folders)
    assert (storage / "step-10").is_dir() and not folders.root.exists()


def test_an_s3_checkpoint_is_downloaded_once_per_node(tempdir: Path, s3_bucket: str):
    storage = open_storage(f"s3://{s3_bucket}/p/job/checkpoints")
    storage.write_bytes("step-20/weights.safetensors", b"w" * 100)
    storage.write_bytes("step-20/rank-1/optim.pt", b"o")
    storage.write_bytes("step-20/manifest.json", b"{}")
    uri = f"{storage.uri}/step-20"
    folders = NodeFolders.for_attempt("att3")
    env = enter(folders, resume=uri, nodes=1)
    local = Path(env[tp_env.RESUME_FROM])
    assert local == folders.root / "resume"
    assert (local / "weights.safetensors").read_bytes() == b"w" * 100
    assert (local / "rank-1" / "optim.pt").read_bytes() == b"o"
    # A second rank of the node gets the same folder, not a second download.
    (local / "seen").write_text("the first download")
    assert _other_rank("att3", uri) == str(local)
    assert (local / "seen").is_file()
    assert not (folders.root / "resume.partial").exists()
    leave(folders)
    assert not folders.root.exists()


def test_folders_no_living_process_claims_are_removed(tempdir: Path):
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    abandoned = tempdir / "trainplane-dead"
    (abandoned / ".claims").mkdir(parents=True)
    (abandoned / ".claims" / gone).touch()
    (abandoned / "checkpoints").mkdir()
    alive = tempdir / "trainplane-alive"
    (alive / ".claims").mkdir(parents=True)
    (alive / ".claims" / str(os.getpid())).touch()
    foreign = tempdir / "trainplane-resume-xyz"  # not a scratch folder: no claims
    foreign.mkdir()
    # What a supervisor stopped halfway through its removal left.
    interrupted = tempdir / "trainplane-half.removed-123"
    (interrupted / "checkpoints").mkdir(parents=True)
    assert remove_abandoned(tempdir) == [abandoned]
    assert not abandoned.exists() and not interrupted.exists()
    assert alive.is_dir() and foreign.is_dir()
    assert sorted(p.name for p in tempdir.iterdir()) == [
        "trainplane-alive",
        "trainplane-resume-xyz",
    ]
    # The next attempt on the node sweeps on its way in.
    (abandoned / ".claims").mkdir(parents=True)
    (abandoned / ".claims" / gone).touch()
    folders = NodeFolders.for_attempt("att4")
    enter(folders, resume=None, nodes=1)
    assert not abandoned.exists()
    leave(folders)
