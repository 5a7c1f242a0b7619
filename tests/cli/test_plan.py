"""``trainplane plan``: the dry run of ``POST /v1/jobs/plan`` against a real
server, one per module (SQLite; the endpoint's own tests cover the backends).
Nothing is created by a plan."""

from __future__ import annotations

import json
import re

import yaml

from tests.cli.conftest import job_ids
from trainplane.cli.common import EXIT_OK, EXIT_USAGE


def test_a_valid_spec_prints_its_placement_and_creates_nothing(
    shared_cli, shared_server, spec_file
):
    before = job_ids(shared_server)
    result = shared_cli("plan", str(spec_file), "--set", "resources.gpus=1")
    assert result.exit_code == EXIT_OK, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "valid: train cli-job"
    # No cluster is registered: it would wait, and says why.
    assert re.search(r"^placement: cluster none; cannot start now; \S", result.stdout, re.M)
    # A field this CLI does not know of is shown as it comes.
    assert re.search(r"^  queue_position: 1$", result.stdout, re.M), result.stdout
    assert job_ids(shared_server) == before


def test_plan_output_json_is_the_servers_answer(shared_cli, spec_file):
    result = shared_cli("plan", str(spec_file), "--output", "json")
    assert result.exit_code == EXIT_OK, result.output
    plan = json.loads(result.stdout)
    assert plan["valid"] is True and plan["checks"] == []
    assert plan["spec"]["name"] == "cli-job" and plan["spec"]["resources"]["gpus"] == 2
    assert plan["placement"]["can_start_now"] is False


def test_a_fine_tune_plan_shows_what_was_checked(shared_cli, finetune_files, tmp_path):
    path = tmp_path / "finetune.yaml"
    path.write_text(yaml.safe_dump(finetune_files.spec(resources={"gpus": 1})))
    result = shared_cli("plan", str(path))
    assert result.exit_code == EXIT_OK, result.output
    checks = {name: mark for mark, name in re.findall(r"^  (ok|FAIL) +(\S+)", result.stdout, re.M)}
    assert checks == {"base_model": "ok", "dataset.train": "ok", "dataset.eval": "ok"}
    assert re.search(r"^  ok    dataset\.train  .*240", result.stdout, re.M), result.stdout


def test_a_missing_dataset_exits_2_naming_the_field_and_creates_nothing(
    shared_cli, shared_server, finetune_files, tmp_path
):
    spec = finetune_files.spec(resources={"gpus": 1})
    spec["dataset"]["train"] = str(tmp_path / "missing.jsonl")
    path = tmp_path / "finetune.yaml"
    path.write_text(yaml.safe_dump(spec))
    before = job_ids(shared_server)

    # Found on this machine, before anything is uploaded.
    text = shared_cli("plan", str(path))
    assert text.exit_code == EXIT_USAGE, text.output
    assert f"dataset.train: {tmp_path / 'missing.jsonl'} does not exist" in text.stderr
    assert "--no-upload sends the paths as they are" in text.stderr

    as_json = shared_cli("plan", str(path), "--output", "json")
    assert as_json.exit_code == EXIT_USAGE
    problem = json.loads(as_json.stdout)
    assert problem["valid"] is False
    assert [e["field"] for e in problem["errors"]] == ["dataset.train"]

    # Sent as a path, the server refuses it: it reads no file of this machine.
    as_path = shared_cli("plan", str(path), "--no-upload", "--output", "json")
    assert as_path.exit_code == EXIT_USAGE
    refused = json.loads(as_path.stdout)
    assert refused["status"] == 422 and "dataset.train" in [e["field"] for e in refused["errors"]]
    assert job_ids(shared_server) == before


def test_an_unreadable_spec_file_exits_2(shared_cli, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("kind: [unclosed")
    result = shared_cli("plan", str(path), "--output", "json")
    assert result.exit_code == EXIT_USAGE
    assert json.loads(result.stdout)["valid"] is False
    assert "not valid YAML" in result.stderr


def test_a_plan_shows_the_strategy_memory_and_cost(shared_cli, spec_file):
    result = shared_cli(
        "plan",
        str(spec_file),
        "--set",
        "strategy.type=auto",
        "--set",
        "model.parameters=7e9",
        "--set",
        "precision=bf16",
    )
    assert result.exit_code == EXIT_OK, result.output
    out = result.stdout
    # No cluster says how big its GPUs are: the cheapest strategy, and why.
    assert re.search(r"^strategy: auto -> ddp: picked ddp, the cheapest: no cluster", out, re.M)
    assert re.search(r"^memory per GPU: [\d.]+ GB$", out, re.M), out
    # Adam's two fp32 moments; the weights stay fp32 under autocast.
    assert re.search(r"^  optimizer_states +56\.00 GB$", out, re.M), out
    assert re.search(r"^  expected_start_basis: unknown: no ready cluster can hold it$", out, re.M)
    assert re.search(r"^cost: unknown", out, re.M)


def test_a_fine_tune_plan_estimates_from_the_base_models_config(
    shared_cli, finetune_files, tmp_path
):
    path = tmp_path / "finetune.yaml"
    # fp32: the tiny model's weights still show in GB rounded to 3 places.
    path.write_text(yaml.safe_dump(finetune_files.spec(resources={"gpus": 1}, precision="fp32")))
    result = shared_cli("plan", str(path), "--output", "json")
    assert result.exit_code == EXIT_OK, result.output
    memory = json.loads(result.stdout)["memory"]
    assert memory is not None and memory["per_gpu_gb"]["parameters"] > 0
    assert memory["per_gpu_gb"]["activations"] > 0  # the config gives the shapes
