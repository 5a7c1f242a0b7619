"""``Client`` and ``AsyncClient`` send what a spec names on this machine to a
server that cannot read it (a real ``trainplane server``): the working folder
as a code bundle, a fine-tune's model and datasets to the project's storage,
each once. To the API as ``trainplane up`` serves it locally, paths go as
they are."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid

import pytest
import yaml

import trainplane
from tests.cli.conftest import local_user_server  # noqa: F401  (a fixture)
from tests.fuzz.live_server import BOOTSTRAP_TOKEN
from tests.sdk.conftest import spec
from trainplane.code_bundles import bundle_of_folder
from trainplane.input_archives import archive_digest, file_digest, folder_members


@pytest.fixture
def job_file(tmp_path, project):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(f"def main(ctx):\n    return {uuid.uuid4().int}\n")
    path = tmp_path / "job.yaml"
    entrypoint = {"function": "train:main", "working_dir": "code"}
    path.write_text(
        yaml.safe_dump(spec(f"up-{uuid.uuid4().hex[:6]}", project, entrypoint=entrypoint))
    )
    return path


def test_the_working_folder_goes_once_to_a_remote_server(admin, job_file, caplog):
    caplog.set_level(logging.INFO, logger="trainplane.sdk")
    first = admin.submit(job_file)
    uploads = [r.message for r in caplog.records if r.message.startswith("uploaded")]
    caplog.clear()
    again = admin.submit(job_file)

    digest = "sha256:" + hashlib.sha256(bundle_of_folder(job_file.parent / "code")).hexdigest()
    assert first.spec["entrypoint"]["code"] == again.spec["entrypoint"]["code"] == digest
    assert len(uploads) == 1 and digest in uploads[0]
    assert [r.message for r in caplog.records] == [
        f"code {job_file.parent / 'code'}: the server has it already ({digest})"
    ]


def test_upload_false_sends_the_path_which_the_server_refuses(admin, job_file):
    with pytest.raises(trainplane.InvalidRequest) as refused:
        admin.submit(job_file, upload=False)
    assert "entrypoint.working_dir" in [e.field for e in refused.value.errors]


def test_a_fine_tunes_inputs_land_in_the_projects_storage(
    admin, project, finetune_files, tmp_path, monkeypatch
):
    # A spec built in code names paths relative to where the program runs.
    monkeypatch.chdir(finetune_files.model.parent)
    document = finetune_files.spec(resources={"gpus": 1}, name="sdk-ft", project=project)
    document["dataset"] = {"train": finetune_files.train.name, "eval": finetune_files.eval.name}

    plan = admin.plan(document)
    job = admin.submit(document)

    model = admin.input_file(project, archive_digest(folder_members(finetune_files.model)).digest)
    train = admin.input_file(project, file_digest(finetune_files.train).digest)
    assert (model.kind, train.kind) == ("folder", "file")
    assert job.spec["base_model"] == plan.spec["base_model"] == model.location
    assert job.spec["dataset"]["train"] == train.location
    assert train.location.endswith(f"/{project}/inputs/{train.digest[7:]}/train.jsonl")


def test_the_async_client_streams_the_inputs_too(live_server, project, finetune_files, tmp_path):
    data = tmp_path / "more.jsonl"
    data.write_text(
        "".join(f'{{"text": "async row {i} {uuid.uuid4().hex}"}}\n' for i in range(300))
    )
    document = finetune_files.spec(resources={"gpus": 1}, name="async-ft", project=project)
    document["dataset"] = {"train": str(data)}

    async def scenario() -> tuple[trainplane.Job, str]:
        async with trainplane.AsyncClient(live_server.url, BOOTSTRAP_TOKEN) as client:
            job = await client.submit(document)
            stored = await client.input_file(project, file_digest(data).digest)
            return job, stored.location

    job, location = asyncio.run(scenario())
    assert job.spec["dataset"]["train"] == location
    with open(location, "rb") as stored:
        assert stored.read() == data.read_bytes()


def test_the_local_users_own_server_gets_paths(local_user_server, job_file):  # noqa: F811
    with trainplane.Client(local_user_server.url) as client:
        job = client.submit(job_file, project="default")
    assert job.spec["entrypoint"]["working_dir"] == str(job_file.parent / "code")
    assert job.spec["entrypoint"].get("code") is None
