"""A fine-tune's base model and datasets go to the project's storage when the
server cannot read this machine's files (a real ``trainplane server``): the
CLI checks them here first, uploads each once (named by digest), and the spec
names where they landed. ``plan`` uploads what ``submit`` would, so the
submit after it sends the spec alone. No cluster: what reaches the server is
the point."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.cli.conftest import cli_for, job_ids
from trainplane.cli.common import EXIT_OK, EXIT_USAGE
from trainplane.input_archives import archive_digest, file_digest, folder_members

FIELDS = ("base_model", "dataset.train", "dataset.eval")


def inputs_folder(server) -> Path:
    return Path(server.env["TRAINPLANE_HOME"]) / "checkpoints" / "default" / "inputs"


@pytest.fixture
def finetune_file(finetune_files, tmp_path) -> Path:
    path = tmp_path / "finetune.yaml"
    path.write_text(yaml.safe_dump(finetune_files.spec(resources={"gpus": 1})))
    return path


def test_plan_uploads_the_inputs_once_and_submit_names_where_they_are(
    shared_cli, shared_server, finetune_files, finetune_file
):
    planned = shared_cli("plan", str(finetune_file))
    assert planned.exit_code == EXIT_OK, planned.output
    for field in FIELDS:
        assert f"uploaded {field} " in planned.stderr, planned.stderr
    assert re.search(r"^  ok    dataset\.train  .*240", planned.stdout, re.M), planned.stdout

    submitted = shared_cli("submit", str(finetune_file), "--output", "json")
    assert submitted.exit_code == EXIT_OK, submitted.output
    assert "uploaded" not in submitted.stderr
    assert submitted.stderr.count("the server has it already") == 3
    spec = json.loads(submitted.stdout)["spec"]

    stored = inputs_folder(shared_server)
    model = archive_digest(folder_members(finetune_files.model)).digest.removeprefix("sha256:")
    train = file_digest(finetune_files.train).digest.removeprefix("sha256:")
    assert spec["base_model"] == str(stored / model)
    assert spec["dataset"]["train"] == str(stored / train / "train.jsonl")
    assert Path(spec["dataset"]["train"]).read_bytes() == finetune_files.train.read_bytes()
    local = sorted(p.relative_to(finetune_files.model) for p in finetune_files.model.rglob("*"))
    assert sorted(p.relative_to(stored / model) for p in (stored / model).rglob("*")) == local


def test_a_broken_dataset_is_refused_here_naming_the_line_and_nothing_goes_up(
    shared_cli, shared_server, finetune_files, tmp_path
):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "1+1", "completion": " 2"}\nnot json\n')
    spec = finetune_files.spec(resources={"gpus": 1}, name="broken-data")
    spec["dataset"]["train"] = str(broken)
    spec["base_model"] = str(tmp_path / "no-model")
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(spec))
    before = (job_ids(shared_server), sorted(inputs_folder(shared_server).glob("*")))

    result = shared_cli("submit", str(path), "--output", "json")

    assert result.exit_code == EXIT_USAGE, result.output
    assert "dataset.train: line 2 is not valid JSON" in result.stderr
    assert f"base_model: {tmp_path / 'no-model'} does not exist" in result.stderr
    fields = [e["field"] for e in json.loads(result.stdout)["errors"]]
    assert fields == ["base_model", "dataset.train"]
    assert (job_ids(shared_server), sorted(inputs_folder(shared_server).glob("*"))) == before


def test_the_local_users_own_server_reads_the_inputs_where_they_are(
    local_user_server, finetune_files, finetune_file
):
    result = cli_for(local_user_server)("submit", str(finetune_file), "--output", "json")
    assert result.exit_code == EXIT_OK, result.output
    spec = json.loads(result.stdout)["spec"]
    assert spec["base_model"] == str(finetune_files.model)
    assert spec["dataset"] == {"train": str(finetune_files.train), "eval": str(finetune_files.eval)}
    assert "uploaded" not in result.stderr and not inputs_folder(local_user_server).exists()
