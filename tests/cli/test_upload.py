"""``trainplane submit`` sends what a remote server cannot read: the working
folder as a code bundle the job names by digest, once per content. A real
``trainplane server`` reads no path of this machine, so the CLI uploads by
default; the API as ``trainplane up`` serves it locally reads them itself,
so nothing is uploaded. No cluster: jobs stay QUEUED, and what reaches the
server is the point."""

from __future__ import annotations

import io
import json
import os
import pickle
import socket
import tempfile
import zipfile
from pathlib import Path

import httpx
import pytest
import yaml

from tests.cli.conftest import SPEC, cli_for, job_ids, run_cli
from trainplane.cli.common import EXIT_OK, EXIT_USAGE
from trainplane.code_bundles import (
    BundleError,
    FolderBundle,
    bundle_of_folder,
    check_bundle,
    digest_of,
    folder_bundle,
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
    (root / "job.yaml").write_text(yaml.safe_dump(SPEC))
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


def test_a_remote_server_gets_the_folder_by_default_and_only_once(shared_cli, project_folder):
    (project_folder / "code" / "train.py").write_text("print('a version of its own')\n")
    first = shared_cli("submit", str(project_folder / "job.yaml"), "--output", "json")
    again = shared_cli("submit", str(project_folder / "job.yaml"), "--output", "json")
    assert first.exit_code == again.exit_code == EXIT_OK, first.output + again.output
    digest = digest_of(bundle_of_folder(project_folder / "code"))
    assert f"uploaded {project_folder / 'code'} (2 files" in first.stderr
    # The server has those bytes: the second submit sends the spec alone.
    assert "uploaded" not in again.stderr
    assert f"code {project_folder / 'code'}: the server has it already ({digest})" in again.stderr
    codes = {json.loads(run.stdout)["spec"]["entrypoint"]["code"] for run in (first, again)}
    assert codes == {digest}


def test_the_local_users_own_server_reads_the_folder_and_nothing_is_uploaded(
    local_user_server, project_folder
):
    cli = cli_for(local_user_server)
    result = cli("submit", str(project_folder / "job.yaml"), "--output", "json")
    assert result.exit_code == EXIT_OK, result.output
    entrypoint = json.loads(result.stdout)["spec"]["entrypoint"]
    assert entrypoint["working_dir"] == str(project_folder / "code")
    assert entrypoint.get("code") is None and "uploaded" not in result.stderr
    digest = digest_of(bundle_of_folder(project_folder / "code"))
    found = httpx.get(f"{local_user_server.url}/v1/projects/default/bundles/{digest}", timeout=10)
    assert found.status_code == 404


def test_no_upload_sends_the_path_which_trainplane_server_refuses(
    shared_cli, shared_server, project_folder
):
    before = job_ids(shared_server)
    result = shared_cli("submit", str(project_folder / "job.yaml"), "--no-upload")
    assert result.exit_code == EXIT_USAGE, result.output
    # The server's refusal, pointed at the field's line in the file.
    assert "job.yaml, line 5: entrypoint.working_dir" in result.stderr
    assert "uploaded" not in result.stderr
    assert job_ids(shared_server) == before


@pytest.mark.parametrize(
    ("entrypoint", "field", "words"),
    [
        ({"working_dir": "missing"}, "entrypoint.working_dir", "missing does not exist"),
        ({"function": "trainer:main"}, "entrypoint.function", "module 'trainer' is not in"),
        ({"function": "model.nets:build"}, "entrypoint.function", "no model/nets.py"),
        ({"script": "finetune.py"}, "entrypoint.script", "finetune.py is not a file in"),
    ],
)
def test_code_that_is_not_where_the_spec_says_exits_2_before_anything_is_sent(
    shared_cli, shared_server, project_folder, entrypoint, field, words
):
    spec = {**SPEC, "entrypoint": {"working_dir": "code", **entrypoint}}
    if "working_dir" in entrypoint:
        spec["entrypoint"]["command"] = ["python", "train.py"]
    (project_folder / "job.yaml").write_text(yaml.safe_dump(spec))
    before = job_ids(shared_server)
    result = shared_cli("submit", str(project_folder / "job.yaml"), "--output", "json")
    assert result.exit_code == EXIT_USAGE, result.output
    assert f"{field}: " in result.stderr and words in result.stderr
    assert [e["field"] for e in json.loads(result.stdout)["errors"]] == [field]
    assert "uploaded" not in result.stderr
    assert job_ids(shared_server) == before


@pytest.mark.parametrize("function", ["train:main", "model.net:build", "json:loads"])
def test_a_module_in_the_folder_or_installed_here_is_found(shared_cli, project_folder, function):
    spec = {**SPEC, "entrypoint": {"function": function, "working_dir": "code"}}
    (project_folder / "job.yaml").write_text(yaml.safe_dump(spec))
    result = shared_cli("submit", str(project_folder / "job.yaml"))
    assert result.exit_code == EXIT_OK, result.output


def test_a_spec_running_an_uploaded_bundle_has_nothing_to_upload(
    shared_cli, shared_server, project_folder
):
    spec = {**SPEC, "entrypoint": {"command": ["python"], "code": "sha256:" + "0" * 64}}
    (project_folder / "job.yaml").write_text(yaml.safe_dump(spec))
    before = job_ids(shared_server)
    result = shared_cli("submit", str(project_folder / "job.yaml"), "--upload")
    # Sent as it is: the server says the project has no such bundle.
    assert result.exit_code == EXIT_USAGE, result.output
    assert "entrypoint.code" in result.stderr and "uploaded" not in result.stderr
    assert job_ids(shared_server) == before


def test_the_trainplane_home_inside_the_folder_stays_home(shared_server, project_folder):
    home = project_folder / "code" / "state"
    home.mkdir()
    (home / "trainplane.db").write_bytes(b"SQLite format 3\0")
    (home / "mlflow.db").write_bytes(b"SQLite format 3\0")
    run = run_cli(
        shared_server.url,
        "submit",
        str(project_folder / "job.yaml"),
        "--output",
        "json",
        env={"TRAINPLANE_HOME": str(home)},
    )
    assert run.returncode == EXIT_OK, run.stderr
    digest = json.loads(run.stdout)["spec"]["entrypoint"]["code"]
    bundle = httpx.get(
        f"{shared_server.url}/v1/projects/default/bundles/{digest}", timeout=10
    ).json()
    assert bundle["files"] == 2  # train.py and model/net.py


def test_the_same_files_make_the_same_bundle(project_folder):
    first = bundle_of_folder(project_folder / "code")
    (project_folder / "code" / "model" / "__pycache__" / "other.pyc").write_bytes(b"1")
    assert bundle_of_folder(project_folder / "code") == first
    with zipfile.ZipFile(io.BytesIO(first)) as archive:
        assert sorted(archive.namelist()) == ["model/net.py", "train.py"]
    assert check_bundle(first).files == 2


def _bundle_as(uid: int, folder: Path) -> FolderBundle:
    """``folder_bundle(folder)`` run by the user ``uid``, in a child process."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            os.setgid(uid)
            os.setuid(uid)
            os.write(write, pickle.dumps(folder_bundle(folder)))
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        data = answer.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


def test_only_regular_readable_files_are_bundled_and_the_unreadable_are_named():
    # A folder any user may enter: the bundle is made as one who cannot read secret.txt.
    folder = Path(tempfile.mkdtemp(prefix="bundle-"))
    try:
        folder.chmod(0o755)
        (folder / "train.py").write_text("print(1)\n")
        (folder / "train.py").chmod(0o644)
        (folder / "secret.txt").write_text("not yours\n")
        (folder / "secret.txt").chmod(0o000 if os.geteuid() else 0o600)
        os.mkfifo(folder / "pipe")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(folder / "control.sock"))
        (folder / "dangling").symlink_to(folder / "gone")
        made = _bundle_as(65534, folder) if os.geteuid() == 0 else folder_bundle(folder)
        listener.close()
    finally:
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()
    assert made.files == 1 and made.unreadable == ("secret.txt",)
    with zipfile.ZipFile(io.BytesIO(made.data)) as archive:
        assert archive.namelist() == ["train.py"]


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


def test_a_folder_past_the_limits_is_refused_naming_the_field(
    shared_cli, project_folder, monkeypatch: pytest.MonkeyPatch
):
    from trainplane import code_bundles

    (project_folder / "code" / "data.bin").write_bytes(b"\1" * 5000)
    monkeypatch.setattr(code_bundles, "MAX_UNPACKED_BYTES", 4096)
    result = shared_cli("submit", str(project_folder / "job.yaml"))
    assert result.exit_code == EXIT_USAGE, result.output
    assert "entrypoint.working_dir: " in result.stderr and "data.bin" in result.stderr


def test_executable_files_stay_executable(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (tmp_path / "code" / "run.sh").chmod(0o755)
    (tmp_path / "code" / "data.txt").write_text("1\n")
    unpacked = unpack_bundle(bundle_of_folder(tmp_path / "code"), tmp_path / "cache")
    assert os.access(unpacked / "run.sh", os.X_OK)
    assert not os.access(unpacked / "data.txt", os.X_OK)


def test_an_invalid_spec_goes_as_it_is_and_nothing_is_uploaded_first(
    shared_cli, shared_server, project_folder
):
    (project_folder / "code" / "train.py").write_text("print('never sent')\n")
    result = shared_cli("plan", str(project_folder / "job.yaml"), "--set", "resources.gpus=0")
    assert result.exit_code == EXIT_USAGE, result.output
    assert "resources.gpus" in result.stderr and "uploaded" not in result.stderr
    digest = digest_of(bundle_of_folder(project_folder / "code"))
    found = httpx.get(f"{shared_server.url}/v1/projects/default/bundles/{digest}", timeout=10)
    assert found.status_code == 404
