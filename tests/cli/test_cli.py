"""The CLI against a real ``trainplane server`` process on each backend."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from tests.cli.conftest import SPEC
from tests.factories import make_attempt, make_job, small_spec
from trainplane.cli.common import EXIT_TIMEOUT, EXIT_UNREACHABLE
from trainplane.cli.main import app
from trainplane.code_bundles import bundle_of_folder, digest_of
from trainplane.jobs.spec import load_spec
from trainplane.jobs.states import JobStatus
from trainplane.services.attempt_tokens import TokenKey, attempt_token
from trainplane.services.locations import checkpoint_root
from trainplane.storage.backends import LocalStorage
from trainplane.storage.checkpoints import FileEntry, Manifest, write_manifest


def test_submit_prints_the_job_id_and_uploads_the_folder_relative_to_the_file(cli, spec_file):
    result = cli("submit", str(spec_file))
    assert result.exit_code == 0, result.output
    job_id = result.stdout.strip()
    assert len(job_id) == 26
    shown = json.loads(cli("jobs", "get", job_id, "--json").stdout)
    assert shown["status"] == "QUEUED"
    # `trainplane server` reads no path of this machine: the folder went up.
    bundle = bundle_of_folder(spec_file.parent / "code")
    assert shown["spec"]["entrypoint"]["code"] == digest_of(bundle)
    assert shown["spec"]["entrypoint"]["working_dir"] == "."


def test_submit_json_file_with_overrides(cli, tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(SPEC))
    (tmp_path / "code").mkdir()
    result = cli("submit", str(path), "--set", "resources.gpus=4", "--set", "strategy.type=fsdp")
    assert result.exit_code == 0, result.output
    job = json.loads(cli("jobs", "get", result.stdout.strip(), "--json").stdout)
    assert (job["gpus"], job["strategy"]) == (4, "fsdp")


def test_invalid_spec_exits_2_naming_the_field(cli, spec_file):
    result = cli("submit", str(spec_file), "--set", "resources.gpus=0")
    assert result.exit_code == 2
    assert "resources.gpus" in result.stderr
    assert json.loads(cli("jobs", "list", "--json").stdout) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [("kind: [unclosed", "not valid YAML"), ("- a list", "must hold a mapping")],
)
def test_unreadable_spec_files_exit_2(cli, tmp_path, content, message):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    result = cli("submit", str(path))
    assert result.exit_code == 2
    assert message in result.stderr


def test_missing_file_exits_2(cli, tmp_path):
    result = cli("submit", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert "cannot read" in result.stderr


def test_idempotency_key_from_the_cli(cli, spec_file):
    first = cli("submit", str(spec_file), "--idempotency-key", "ci-run-7").stdout.strip()
    second = cli("submit", str(spec_file), "--idempotency-key", "ci-run-7").stdout.strip()
    assert first == second
    clash = cli(
        "submit",
        str(spec_file),
        "--idempotency-key",
        "ci-run-7",
        "--set",
        "name=other",
        "--output",
        "json",
    )
    assert clash.exit_code == 1
    assert "409" in clash.stderr and f"already used for job {first}" in clash.stderr
    assert json.loads(clash.stdout)["outcome"] == "refused"


def test_list_cancel_and_events(cli, spec_file):
    ids = [cli("submit", str(spec_file)).stdout.strip() for _ in range(3)]
    listing = cli("jobs", "list")
    assert all(job_id in listing.stdout for job_id in ids)
    assert cli("jobs", "cancel", ids[0]).exit_code == 0
    assert "CANCELLED" in cli("jobs", "get", ids[0]).stdout
    again = cli("jobs", "cancel", ids[0])
    # Already cancelled is what was asked for: exit 0, saying so.
    assert again.exit_code == 0 and "already cancelled" in again.stderr
    events = cli("jobs", "events", ids[0]).stdout
    assert "QUEUED" in events and "CANCELLED" in events
    queued = json.loads(cli("jobs", "list", "--status", "queued", "--json").stdout)
    assert {j["id"] for j in queued} == set(ids[1:])
    paged = json.loads(cli("jobs", "list", "--limit", "1", "--all", "--json").stdout)
    assert [j["id"] for j in paged] == list(reversed(ids))


def test_submit_wait_gives_up_after_timeout_with_exit_5(cli, spec_file):
    result = cli("submit", str(spec_file), "--wait", "--timeout", "1", "--output", "json")
    assert result.exit_code == EXIT_TIMEOUT == 5
    assert "gave up waiting after 1s" in result.stderr and "it goes on" in result.stderr
    assert result.stderr.rstrip().endswith(
        "exit code 5: gave up waiting after --timeout; the job goes on"
    )
    summary = json.loads(result.stdout)
    assert (summary["status"], summary["outcome"], summary["exit_code"]) == (
        "QUEUED",
        "timed_out",
        5,
    )


def test_unreachable_server_is_a_clear_error_with_exit_6(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["--url", "http://127.0.0.1:9", "jobs", "list"])
    assert result.exit_code == EXIT_UNREACHABLE == 6
    assert "cannot reach trainplane" in result.stderr


def test_the_installed_command_runs(server, spec_file):
    """The console script itself, as a user runs it (env configuration)."""
    env = {**os.environ, "TRAINPLANE_URL": server.url}
    trainplane = Path(sys.executable).with_name("trainplane")
    result = subprocess.run(
        [trainplane, "submit", str(spec_file)], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.strip()) == 26


def test_clusters_add_list_remove(cli):
    added = cli(
        "clusters",
        "add",
        "gpu-a",
        "--address",
        "http://10.0.0.5:8265",
        "--accelerator",
        "H100",
        "--gpus",
        "16",
        "--gpus-per-node",
        "8",
        "--price-per-gpu-hour",
        "2.5",
        "--label",
        "zone=eu",
    )
    assert added.exit_code == 0, added.output
    listed = json.loads(cli("clusters", "list", "--json").stdout)
    assert [(c["name"], c["gpus"], c["gpus_per_node"], c["labels"]) for c in listed] == [
        ("gpu-a", 16, 8, {"zone": "eu"})
    ]
    assert "gpu-a" in cli("clusters", "list").stdout
    bad = cli("clusters", "add", "gpu-b", "--address", "nowhere", "--gpus", "2")
    assert bad.exit_code == 2 and "address" in bad.stderr
    assert cli("clusters", "remove", "gpu-a").exit_code == 0
    assert json.loads(cli("clusters", "list", "--json").stdout) == []
    missing = cli("clusters", "remove", "gpu-a")
    assert missing.exit_code == 1 and "404" in missing.stderr


def test_clusters_apply_registers_updates_and_repeats_safely(cli, tmp_path):
    path = tmp_path / "clusters.yaml"
    declared = [
        {"name": "h100", "address": "http://ray-h100:8265", "accelerator": "H100", "gpus": 16,
         "gpus_per_node": 8, "labels": {"pool": "h100"}},
        {"name": "a100", "address": "http://ray-a100:8265", "accelerator": "A100", "gpus": 8},
    ]  # fmt: skip
    path.write_text(yaml.safe_dump({"clusters": declared}))
    first = cli("clusters", "apply", str(path))
    assert first.exit_code == 0, first.output
    assert first.stdout.split() == ["h100", "created", "a100", "created"]
    assert cli("clusters", "apply", str(path)).stdout.split() == [
        "h100", "unchanged", "a100", "unchanged"
    ]  # fmt: skip
    declared[1]["gpus"] = 16
    path.write_text(yaml.safe_dump({"clusters": declared}))
    assert cli("clusters", "apply", str(path)).stdout.split()[3] == "updated"
    listed = json.loads(cli("clusters", "list", "--json").stdout)
    assert {c["name"]: (c["accelerator"], c["gpus"]) for c in listed} == {
        "a100": ("A100", 16),
        "h100": ("H100", 16),
    }
    # A mistake anywhere in the file changes nothing, and names the entry.
    declared[1]["colour"] = "red"
    path.write_text(yaml.safe_dump({"clusters": [*declared, {"name": "new", "gpus": 1}]}))
    bad = cli("clusters", "apply", str(path))
    assert bad.exit_code == 2 and "clusters[1].colour" in bad.stderr
    assert len(json.loads(cli("clusters", "list", "--json").stdout)) == 2
    # The server's validation names the entry too.
    path.write_text(yaml.safe_dump({"clusters": [{"name": "x", "address": "nowhere", "gpus": 1}]}))
    refused = cli("clusters", "apply", str(path))
    assert refused.exit_code == 2 and "clusters[0] (x)" in refused.stderr
    assert "address" in refused.stderr


def test_a_job_too_big_for_every_cluster_is_refused_with_exit_2(cli, spec_file):
    cli("clusters", "add", "small", "--address", "http://10.0.0.5:8265", "--gpus", "1")
    result = cli("submit", str(spec_file))  # asks for 2
    assert result.exit_code == 2
    assert "resources.gpus" in result.stderr and "small has 1 cpu" in result.stderr


def test_logs_of_a_job_that_has_not_run_are_empty(cli, spec_file):
    job_id = cli("submit", str(spec_file)).stdout.strip()
    result = cli("jobs", "logs", job_id)
    assert result.exit_code == 0 and result.stdout == ""
    assert cli("jobs", "logs", "nope").exit_code == 1


def test_metrics_and_checkpoints_of_a_job(cli, server, session, tmp_path):
    storage_root = str(tmp_path / "ckpt")
    job = make_job(
        session,
        status=JobStatus.RUNNING,
        spec=small_spec(gpus=1, checkpoint={"storage": storage_root}),
    )
    attempt = make_attempt(session, job.id)
    token = attempt_token(TokenKey(None).get(session), attempt.id)
    report = {
        "step": 2,
        "total_steps": 10,
        "points": [
            {"step": 1, "time": 1_800_000_000.0, "metrics": {"loss": 0.9}},
            {"step": 2, "time": 1_800_000_001.0, "metrics": {"loss": 0.8, "lr": 0.001}},
        ],
    }
    posted = httpx.post(
        f"{server.url}/v1/jobs/{job.id}/attempts/{attempt.id}/progress",
        json=report,
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert posted.status_code == 200, posted.text
    storage = LocalStorage(
        checkpoint_root(job.folder, load_spec(job.spec), "default", job.id, "/unused")
    )
    weights = b"w" * 2048
    storage.write_bytes("step-2/model.pt", weights)
    entry = FileEntry(path="model.pt", size=2048, sha256=hashlib.sha256(weights).hexdigest())
    write_manifest(
        storage,
        Manifest(step=2, strategy="ddp", format="state-dict", world_size=1, files=[entry]),
    )

    table = cli("jobs", "metrics", job.id)
    assert table.exit_code == 0, table.output
    assert "attempt 1 at step 2/10" in table.stdout
    assert "LOSS" in table.stdout and "0.8" in table.stdout
    first_page = cli("jobs", "metrics", job.id, "--limit", "1")
    assert "more points: use --all" in first_page.stderr
    every = json.loads(cli("jobs", "metrics", job.id, "--limit", "1", "--all", "--json").stdout)
    assert [p["step"] for p in every["points"]] == [1, 2]
    assert every["progress"]["step"] == 2
    assert "attempt 1 at step 2/10" in cli("jobs", "get", job.id).stdout

    listed = cli("jobs", "checkpoints", job.id)
    assert listed.exit_code == 0, listed.output
    assert f"{storage.uri}/step-2" in listed.stdout and "2.0 KiB" in listed.stdout
    as_json = json.loads(cli("jobs", "checkpoints", job.id, "--json").stdout)
    assert [c["step"] for c in as_json["checkpoints"]] == [2]
    assert cli("jobs", "checkpoints", "nope").exit_code == 1
    assert cli("jobs", "metrics", "nope").exit_code == 1
