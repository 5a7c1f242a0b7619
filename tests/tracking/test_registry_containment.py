"""Registering a job's model trusts nothing the job wrote: a manifest whose
extras name folders outside the model folder (``..``, an absolute path), a
symlink in the model folder, or an S3 key with ``..`` registers nothing,
uploads nothing from outside and writes nothing outside a scratch folder."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from trainplane.storage.backends import Storage, open_storage
from trainplane.tracking.client import MlflowTracking, TrackingConfig
from trainplane.tracking.registry import ModelUnavailable, Registration, register

MLMODEL = b"flavors: {}\n"


@pytest.fixture
def mlflow(mlflow_uri: str, tmp_path: Path) -> MlflowTracking:
    return MlflowTracking(
        TrackingConfig(mlflow_uri, mlflow_uri, str(tmp_path / "mlflow-artifacts"), None)
    )


@pytest.fixture
def run_id(mlflow: MlflowTracking) -> str:
    experiment = mlflow.experiment(f"containment-{uuid.uuid4().hex[:8]}")
    return mlflow.create_run(experiment, name="job", start_time_ms=0, tags={})


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    folder = tmp_path / "server-secrets"
    folder.mkdir()
    (folder / "admin-token").write_text("server-secret-value")
    return folder


def export(storage: Storage, *, extras: dict[str, str] | None = None, **more: bytes) -> None:
    """A model folder as the runtime writes it: files first, manifest last."""
    files = {"mlflow/MLmodel": MLMODEL, **{k.replace("__", "/"): v for k, v in more.items()}}
    for path, data in files.items():
        storage.write_bytes(path, data)
    manifest: dict[str, Any] = {
        "flavor": "pytorch",
        "serialization": "pt2",
        "step": 1,
        "strategy": "ddp",
        "world_size": 1,
        "extras": extras or {},
        "files": [
            {"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
            for p, d in files.items()
        ],
    }
    storage.write_bytes("manifest.json", json.dumps(manifest).encode())


def registering(mlflow: MlflowTracking, run_id: str, model_root: str) -> str:
    registration = Registration(
        name=f"m-{uuid.uuid4().hex[:8]}",
        alias=None,
        run_id=run_id,
        model_root=model_root,
        job_id="job-1",
        project="alpha",
        job_url=None,
    )
    return register(mlflow, registration, still_ours=lambda: True)


def uploaded(mlflow: MlflowTracking, run_id: str) -> list[str]:
    client = mlflow.client
    found, folders = [], [""]
    while folders:
        for item in client.list_artifacts(run_id, folders.pop() or None):
            (folders if item.is_dir else found).append(item.path)
    return found


def test_a_clean_export_registers_from_a_copy(mlflow, run_id, tmp_path) -> None:
    root = tmp_path / "alpha" / "job-1" / "model"
    export(
        open_storage(str(root)),
        mlflow__weights=b"w",
        merged__MLmodel=MLMODEL,
        extras={"merged": "merged"},
    )
    assert registering(mlflow, run_id, str(root)) == "1"
    assert sorted(uploaded(mlflow, run_id)) == ["merged/MLmodel", "model/MLmodel", "model/weights"]


@pytest.mark.parametrize("extra", ["../../../server-secrets", "/etc", "mlflow/../.."])
def test_extras_outside_the_model_folder_register_nothing(
    mlflow, run_id, tmp_path, secret, extra
) -> None:
    root = tmp_path / "alpha" / "job-1" / "model"
    export(open_storage(str(root)), extras={"stolen": extra})
    with pytest.raises(ModelUnavailable, match="unreadable"):
        registering(mlflow, run_id, str(root))
    assert uploaded(mlflow, run_id) == []


def test_an_extra_cannot_stand_in_for_the_main_model(mlflow, run_id, tmp_path) -> None:
    root = tmp_path / "alpha" / "job-1" / "model"
    export(open_storage(str(root)), extras={"model": "mlflow"})
    with pytest.raises(ModelUnavailable):
        registering(mlflow, run_id, str(root))


@pytest.mark.parametrize("link", ["mlflow/token", "mlflow/etc"])
def test_a_symlink_in_the_model_folder_uploads_nothing_from_outside(
    mlflow, run_id, tmp_path, secret, link
) -> None:
    root = tmp_path / "alpha" / "job-1" / "model"
    export(open_storage(str(root)))
    target = secret / "admin-token" if link.endswith("token") else secret
    (root / link).symlink_to(target)
    with pytest.raises(ModelUnavailable, match="symlink"):
        registering(mlflow, run_id, str(root))
    assert not any(path.endswith(("token", "admin-token")) for path in uploaded(mlflow, run_id))


def test_the_mlflow_folder_itself_a_symlink_registers_nothing(
    mlflow, run_id, tmp_path, secret
) -> None:
    root = tmp_path / "alpha" / "job-1" / "model"
    export(open_storage(str(root)))
    (root / "elsewhere").mkdir()
    for item in (root / "mlflow").iterdir():
        item.rename(root / "elsewhere" / item.name)
    (root / "mlflow").rmdir()
    (root / "mlflow").symlink_to(secret)
    with pytest.raises(ModelUnavailable):
        registering(mlflow, run_id, str(root))
    assert uploaded(mlflow, run_id) == []


def test_an_s3_key_with_dot_dot_writes_nothing_outside_scratch(
    mlflow, run_id, s3_bucket, tmp_path, monkeypatch
) -> None:
    root = f"s3://{s3_bucket}/alpha/job-1/model"
    storage = open_storage(root)
    export(storage)
    escaped = "alpha/job-1/model/mlflow/../../../../escaped.txt"
    storage.client.put_object(Bucket=s3_bucket, Key=escaped, Body=b"escaped")  # type: ignore[attr-defined]
    # Deep enough that four levels up is still inside tmp_path.
    scratch = tmp_path / "a" / "b" / "c" / "tmp"
    scratch.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(scratch))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR is read again
    with pytest.raises(ModelUnavailable, match=r"escaped\.txt"):
        registering(mlflow, run_id, root)
    assert not list(tmp_path.rglob("escaped.txt"))
    assert uploaded(mlflow, run_id) == []
