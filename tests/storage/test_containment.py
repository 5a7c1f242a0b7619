"""Paths and keys a job wrote cannot lead outside their folder: ``..``,
absolute paths, symlinks and S3 keys with ``..`` are refused, never followed
(storage.containment, storage.backends)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainplane.storage import checkpoints as layout
from trainplane.storage.backends import LocalStorage, S3Storage, UnsafeEntry
from trainplane.storage.containment import UnsafePath, has_dot_segments, relative_parts, within


@pytest.mark.parametrize(
    "path", ["../x", "a/../../x", "/etc/passwd", "a//b", "./a", "a/.", "a\x00b", "", ".."]
)
def test_a_path_that_could_leave_its_folder_is_refused(path: str) -> None:
    with pytest.raises(UnsafePath):
        relative_parts(path)


def test_a_plain_relative_path_is_its_segments() -> None:
    assert relative_parts("mlflow/data/model.pth") == ["mlflow", "data", "model.pth"]
    assert relative_parts("..hidden/x..y") == ["..hidden", "x..y"]


def test_within_compares_on_segment_boundaries(tmp_path: Path) -> None:
    root = tmp_path / "alpha"
    assert within(str(root / "job" / "x"), str(root))
    assert within(str(root), str(root))
    assert not within(str(tmp_path / "alpha-old" / "x"), str(root))
    assert not within(str(tmp_path), str(root))
    assert not within("relative/path", str(root))


def test_within_resolves_symlinks_before_comparing(tmp_path: Path) -> None:
    root = tmp_path / "alpha"
    root.mkdir()
    (root / "out").symlink_to(tmp_path / "elsewhere")
    (root / "in").symlink_to(root / "sub")
    assert not within(str(root / "out" / "file"), str(root))
    assert within(str(root / "in" / "file"), str(root))


def test_within_for_s3_needs_the_same_bucket_and_a_key_under_the_prefix() -> None:
    assert within("s3://b/alpha/job-1", "s3://b/alpha")
    assert within("s3://b/alpha", "s3://b/alpha/")
    assert within("s3://b/anything", "s3://b")
    assert not within("s3://b/alpha-old/job", "s3://b/alpha")
    assert not within("s3://other/alpha/job", "s3://b/alpha")
    assert not within("s3://b/alpha/job", "/b/alpha")
    assert not within("/b/alpha/job", "s3://b/alpha")


def test_dot_segments_are_found_in_paths_and_uris() -> None:
    assert has_dot_segments("/data/alpha/../beta")
    assert has_dot_segments("s3://b/alpha/../beta/x")
    assert has_dot_segments("/data/./x")
    assert not has_dot_segments("/data/a..b/.hidden")


# --- a local storage -------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "token").write_text("do-not-copy")
    return secret


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    root = tmp_path / "job" / "model"
    (root / "mlflow").mkdir(parents=True)
    (root / "mlflow" / "MLmodel").write_text("flavors: {}\n")
    return LocalStorage(root)


@pytest.mark.parametrize("path", ["../../secret/token", "/etc/passwd", "mlflow/../../x"])
def test_a_local_storage_refuses_paths_that_leave_it(storage: LocalStorage, path: str) -> None:
    for operation in (storage.read_bytes, storage.delete, storage.sizes):
        with pytest.raises(UnsafeEntry):
            operation(path)
    with pytest.raises(UnsafeEntry):
        storage.write_bytes(path, b"x")
    with pytest.raises(UnsafeEntry):
        storage.get_tree(path, storage.root.parent / "copy")


def test_a_symlink_out_of_a_local_storage_is_not_followed(
    storage: LocalStorage, outside: Path, tmp_path: Path
) -> None:
    (storage.root / "linked").symlink_to(outside)
    with pytest.raises(UnsafeEntry, match="symlink"):
        storage.read_bytes("linked/token")
    # Not a folder of the storage's, so never a checkpoint.
    assert "linked" not in storage.child_folders()
    assert storage.sizes("") == {"mlflow/MLmodel": len("flavors: {}\n")}


@pytest.mark.parametrize("kind", ["file", "folder", "inside"])
def test_copying_a_tree_refuses_any_symlink_in_it(
    storage: LocalStorage, outside: Path, tmp_path: Path, kind: str
) -> None:
    link = storage.root / "mlflow" / "extra"
    if kind == "file":
        link.symlink_to(outside / "token")
    elif kind == "folder":
        link.symlink_to(outside)
    else:
        link.symlink_to(storage.root / "mlflow" / "MLmodel")
    copy = tmp_path / "copy"
    with pytest.raises(UnsafeEntry, match="symlink"):
        storage.get_tree("mlflow", copy)
    copied = [p for p in copy.rglob("*") if p.is_file()] if copy.exists() else []
    assert all("do-not-copy" not in p.read_text() for p in copied)


def test_copying_a_tree_refuses_a_fifo_without_blocking(
    storage: LocalStorage, tmp_path: Path
) -> None:
    os.mkfifo(storage.root / "mlflow" / "pipe")
    with pytest.raises(UnsafeEntry, match="not a regular file"):
        storage.get_tree("mlflow", tmp_path / "copy")


def test_copying_a_tree_copies_its_regular_files(storage: LocalStorage, tmp_path: Path) -> None:
    (storage.root / "mlflow" / "data").mkdir()
    (storage.root / "mlflow" / "data" / "weights.pt").write_bytes(b"\x01" * 10)
    storage.get_tree("mlflow", tmp_path / "copy")
    assert (tmp_path / "copy" / "data" / "weights.pt").read_bytes() == b"\x01" * 10
    assert (tmp_path / "copy" / "MLmodel").read_text() == "flavors: {}\n"


def test_a_step_folder_reached_through_a_symlink_is_no_checkpoint(
    tmp_path: Path, outside: Path
) -> None:
    root = tmp_path / "checkpoints"
    root.mkdir()
    (root / "step-10").symlink_to(outside)
    assert layout.scan(LocalStorage(root)) == []


@pytest.mark.parametrize("path", ["../x.pt", "/etc/shadow", "a/../../b"])
def test_a_manifest_listing_a_path_outside_its_folder_does_not_count(
    tmp_path: Path, path: str
) -> None:
    storage = LocalStorage(tmp_path / "checkpoints")
    storage.write_bytes(
        "step-1/manifest.json",
        (
            '{"step": 1, "strategy": "ddp", "format": "state-dict", "world_size": 1,'
            f' "files": [{{"path": "{path}", "size": 0, "sha256": ""}}]}}'
        ).encode(),
    )
    (folder,) = layout.scan(storage)
    assert not folder.complete and "unreadable manifest" in (folder.problem or "")


# --- an S3 storage ---------------------------------------------------------------


def test_an_s3_key_with_dot_dot_is_never_written_outside_the_target(
    s3_bucket: str, tmp_path: Path
) -> None:
    storage = S3Storage(f"s3://{s3_bucket}/proj/job/model")
    storage.write_bytes("mlflow/MLmodel", b"flavors: {}\n")
    key = "proj/job/model/mlflow/../../../../escaped.txt"
    storage.client.put_object(Bucket=s3_bucket, Key=key, Body=b"escaped")
    assert key in _keys(storage)  # the store kept the key as written
    target = tmp_path / "scratch" / "a" / "b" / "mlflow"
    with pytest.raises(UnsafeEntry, match=r"escaped\.txt"):
        storage.get_tree("mlflow", target)
    assert not list(tmp_path.rglob("escaped.txt"))
    assert not target.exists()  # refused before anything was written


def test_s3_folder_markers_are_skipped_and_files_land_in_place(
    s3_bucket: str, tmp_path: Path
) -> None:
    storage = S3Storage(f"s3://{s3_bucket}/proj/job/model")
    storage.write_bytes("mlflow/data/model.pth", b"w")
    storage.client.put_object(Bucket=s3_bucket, Key="proj/job/model/mlflow/data/", Body=b"")
    storage.get_tree("mlflow", tmp_path / "copy")
    assert (tmp_path / "copy" / "data" / "model.pth").read_bytes() == b"w"


def _keys(storage: S3Storage) -> list[str]:
    answer = storage.client.list_objects_v2(Bucket=storage.bucket, Prefix=storage.prefix)
    return [entry["Key"] for entry in answer.get("Contents", [])]
