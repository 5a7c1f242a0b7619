"""Checkpoint folders and manifests on a local folder and on S3 (moto)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from trainplane.storage import checkpoints as layout
from trainplane.storage.backends import S3Storage, Storage, StorageError, open_storage

pytestmark = pytest.mark.ray_free


@pytest.fixture(params=["local", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "local":
        return open_storage(str(tmp_path / "ckpt"))
    bucket = request.getfixturevalue("s3_bucket")
    return open_storage(f"s3://{bucket}/project/job/checkpoints")


def save(storage: Storage, step: int, *, metrics: dict | None = None, manifest: bool = True):
    payload = f"weights at {step}".encode()
    folder = layout.step_folder(step)
    storage.write_bytes(f"{folder}/model.pt", payload)
    storage.write_bytes(f"{folder}/trainer/state.pt", b"state")
    if manifest:
        files = [
            layout.FileEntry(path=p, size=len(d), sha256=hashlib.sha256(d).hexdigest())
            for p, d in (("model.pt", payload), ("trainer/state.pt", b"state"))
        ]
        layout.write_manifest(
            storage,
            layout.Manifest(
                step=step,
                metrics=metrics or {},
                strategy="ddp",
                format="state-dict",
                world_size=2,
                files=files,
            ),
        )


def test_only_folders_with_a_valid_manifest_count(storage: Storage) -> None:
    save(storage, 10)
    save(storage, 20)
    save(storage, 30, manifest=False)  # a save that died before its manifest
    storage.write_bytes("notes/readme.txt", b"not a checkpoint")
    folders = layout.scan(storage)
    assert [(f.step, f.complete) for f in folders] == [(10, True), (20, True), (30, False)]
    assert "no manifest" in (folders[2].problem or "")
    latest = layout.latest_complete(storage)
    assert latest is not None and latest.step == 20
    assert latest.uri.endswith("/step-20")


def test_a_missing_or_truncated_file_makes_a_checkpoint_incomplete(storage: Storage) -> None:
    save(storage, 10)
    save(storage, 20)
    storage.delete("step-20/model.pt")
    storage.write_bytes("step-10/model.pt", b"short")
    folders = {f.step: f for f in layout.scan(storage)}
    assert not folders[10].complete and "model.pt" in (folders[10].problem or "")
    assert not folders[20].complete
    assert layout.latest_complete(storage) is None


def test_a_manifest_for_another_step_or_unreadable_does_not_count(storage: Storage) -> None:
    save(storage, 10)
    storage.write_bytes("step-10/manifest.json", b"{not json")
    save(storage, 20)
    raw = storage.read_bytes("step-20/manifest.json")
    assert raw is not None
    storage.write_bytes("step-20/manifest.json", raw.replace(b'"step": 20', b'"step": 21'))
    problems = [f.problem for f in layout.scan(storage)]
    assert "unreadable manifest" in (problems[0] or "")
    assert "step 21" in (problems[1] or "")


def test_remove_takes_the_whole_folder(storage: Storage) -> None:
    save(storage, 10)
    save(storage, 20)
    layout.remove(storage, "step-10")
    assert [f.step for f in layout.scan(storage)] == [20]
    assert storage.read_bytes("step-10/model.pt") is None


def test_describe_reports_size_and_metrics(storage: Storage) -> None:
    save(storage, 10, metrics={"loss": 1.5})
    (folder,) = layout.complete_checkpoints(storage)
    shown = layout.describe(folder)
    assert shown["step"] == 10 and shown["metrics"] == {"loss": 1.5}
    assert shown["size_bytes"] == len(b"weights at 10") + len(b"state")
    assert shown["files"] == 2 and shown["world_size"] == 2


def folders(*steps_and_losses: tuple[int, float]) -> list[layout.CheckpointFolder]:
    return [
        layout.CheckpointFolder(
            step,
            f"step-{step}",
            f"/x/step-{step}",
            layout.Manifest(
                step=step,
                metrics={"loss": loss},
                strategy="ddp",
                format="state-dict",
                world_size=1,
                files=[],
            ),
            None,
        )
        for step, loss in steps_and_losses
    ]


def test_retention_keeps_the_last_n() -> None:
    complete = folders((10, 3.0), (20, 2.0), (30, 1.0), (40, 1.5))
    victims = layout.retention_victims(complete, keep_last=2)
    assert [v.step for v in victims] == [10, 20]


@pytest.mark.parametrize(("mode", "kept_best"), [("min", 30), ("max", 10)])
def test_retention_also_keeps_the_best_by_the_metric(mode: str, kept_best: int) -> None:
    complete = folders((10, 3.0), (20, 2.0), (30, 1.0), (40, 1.5), (50, 2.5))
    victims = layout.retention_victims(
        complete, keep_last=1, keep_best_metric="loss", keep_best_mode=mode
    )
    kept = {f.step for f in complete} - {v.step for v in victims}
    assert kept == {50, kept_best}


def test_relative_or_bucketless_storage_is_refused() -> None:
    with pytest.raises(StorageError, match="absolute path"):
        open_storage("relative/ckpt")
    with pytest.raises(StorageError, match="no bucket"):
        open_storage("s3:///prefix")


def test_an_s3_failure_is_a_storage_error_naming_the_uri(s3_bucket: str) -> None:
    missing = open_storage(f"s3://{s3_bucket}-gone/prefix")
    with pytest.raises(StorageError, match=f"s3://{s3_bucket}-gone/prefix"):
        layout.scan(missing)


def test_a_large_file_goes_up_in_parts_each_checksummed(s3_bucket: str, tmp_path: Path) -> None:
    part = 5 * 1024 * 1024  # the smallest part S3 takes
    storage = S3Storage(f"s3://{s3_bucket}/big", multipart_threshold=part)
    data = os.urandom(2 * part + 1024)
    local = tmp_path / "weights.bin"
    local.write_bytes(data)
    storage.put_file(local, "step-00000010/weights.bin")
    head = storage.client.head_object(
        Bucket=s3_bucket, Key="big/step-00000010/weights.bin", ChecksumMode="ENABLED"
    )
    # A multipart object's ETag ends in its number of parts; S3 kept the
    # SHA-256 it checked the parts against.
    assert head["ETag"].strip('"').endswith("-3")
    assert head["ChecksumSHA256"]
    assert head["ContentLength"] == len(data)
    copy = tmp_path / "copy"
    storage.get_tree("step-00000010", copy)
    assert (copy / "weights.bin").read_bytes() == data
