"""``trainplane submit FILE --upload``: the working folder goes to a real
server as a code bundle and the job names its digest instead of a path. No
cluster: the job stays QUEUED, and what reaches the server is the point."""

from __future__ import annotations

import io
import json
import os
import zipfile

import httpx
import pytest
import yaml

from tests.cli.conftest import SPEC, job_ids
from trainplane.cli.common import EXIT_OK, EXIT_USAGE
from trainplane.code_bundles import (
    BundleError,
    bundle_of_folder,
    check_bundle,
    digest_of,
    unpack_bundle,
)


@pytest.fixture
def project_folder(tmp_path):
    """A job's folder: its spec, its code, and what must not ship with it."""
    root = tmp_path / "repo"
    (root / "code" / "model").mkdir(parents=True)
    (root / "code" / "train.py").write_text("from model.net import build\nbuild()\n")
    (root / "code" / "model" / "net.py").write_text("def build():\n    return 1\n")
    (root / "code" / ".git").mkdir()
    (root / "code" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "code" / "model" / "__pycache__").mkdir()
    (root / "code" / "model" / "__pycache__" / "net.cpython-311.pyc").write_bytes(b"\0" * 64)
    (root / "code" / ".venv" / "bin").mkdir(parents=True)
    (root / "code" / ".venv" / "bin" / "python").write_text("")
    (root / "job.yaml").write_text(yaml.safe_dump({**SPEC, "checkpoint": {"storage": "/ckpt"}}))
    return root


def test_the_working_folder_is_uploaded_and_named_by_digest(
    shared_cli, shared_server, project_folder
):
    result = shared_cli("submit", str(project_folder / "job.yaml"), "--upload", "--output", "json")
    assert result.exit_code == EXIT_OK, result.output
    job = json.loads(result.stdout)
    entrypoint = job["spec"]["entrypoint"]
    expected = digest_of(bundle_of_folder(project_folder / "code"))
    assert entrypoint["code"] == expected
    assert entrypoint["working_dir"] == "."  # the default: the bundle itself, no local path
    assert f"as {expected}" in result.stderr
    bundle = httpx.get(f"{shared_server.url}/v1/projects/default/bundles/{expected}", timeout=10)
    assert bundle.status_code == 200
    assert bundle.json()["files"] == 2  # train.py and model/net.py: no .git, .venv or .pyc


def test_the_same_files_make_the_same_bundle(project_folder):
    first = bundle_of_folder(project_folder / "code")
    (project_folder / "code" / "model" / "__pycache__" / "other.pyc").write_bytes(b"1")
    assert bundle_of_folder(project_folder / "code") == first
    with zipfile.ZipFile(io.BytesIO(first)) as archive:
        assert sorted(archive.namelist()) == ["model/net.py", "train.py"]
    assert check_bundle(first).files == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"working_dir": "missing"}, "entrypoint.working_dir"),
        ({"code": "sha256:" + "0" * 64}, "entrypoint.code already names"),
    ],
)
def test_an_upload_that_cannot_be_made_exits_2_and_submits_nothing(
    shared_cli, shared_server, project_folder, change, message
):
    spec = {**SPEC, "entrypoint": {**SPEC["entrypoint"], **change}}
    if "code" in change:
        del spec["entrypoint"]["working_dir"]
    (project_folder / "job.yaml").write_text(yaml.safe_dump(spec))
    before = job_ids(shared_server)
    result = shared_cli("submit", str(project_folder / "job.yaml"), "--upload")
    assert result.exit_code == EXIT_USAGE, result.output
    assert message in result.stderr
    assert job_ids(shared_server) == before


def test_a_folder_past_the_limits_is_refused_naming_its_biggest_files(
    tmp_path, monkeypatch: pytest.MonkeyPatch
):
    from trainplane import code_bundles

    (tmp_path / "data.bin").write_bytes(b"\1" * 5000)
    (tmp_path / "train.py").write_text("print('hi')\n")
    monkeypatch.setattr(code_bundles, "MAX_UNPACKED_BYTES", 4096)
    with pytest.raises(BundleError, match=r"the biggest: data\.bin") as refused:
        bundle_of_folder(tmp_path)
    assert "read data from storage" in str(refused.value)


def test_executable_files_stay_executable(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (tmp_path / "code" / "run.sh").chmod(0o755)
    (tmp_path / "code" / "data.txt").write_text("1\n")
    unpacked = unpack_bundle(bundle_of_folder(tmp_path / "code"), tmp_path / "cache")
    assert os.access(unpacked / "run.sh", os.X_OK)
    assert not os.access(unpacked / "data.txt", os.X_OK)
