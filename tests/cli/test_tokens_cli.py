"""``trainplane tokens``, and which token the CLI sends: a real server with a
bootstrap token, the installed command in its own process."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import BOOTSTRAP, run_cli
from trainplane.sdk.credentials import token_for


def test_tokens_are_created_listed_used_and_revoked(secured, tmp_path):
    admin = {"TRAINPLANE_TOKEN": BOOTSTRAP, "TRAINPLANE_HOME": str(tmp_path / "client")}
    created = run_cli(
        secured.url,
        *("tokens", "create", "ci-default", "--project", "default", "--role", "viewer"),
        *("--service", "--expires-in", "30d"),
        env=admin,
    )
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert secret.startswith("tp_") and "keep the secret now" in created.stderr

    listed = run_cli(secured.url, "tokens", "list", "--json", env=admin)
    tokens = {t["name"]: t for t in json.loads(listed.stdout)}
    assert set(tokens) == {"bootstrap", "ci-default"}
    mine = tokens["ci-default"]
    assert (mine["kind"], mine["status"], mine["grants"]) == (
        "service",
        "active",
        [{"project": "default", "role": "viewer"}],
    )
    assert secret.startswith(mine["prefix"]) and secret not in listed.stdout

    viewer = {"TRAINPLANE_TOKEN": secret, "TRAINPLANE_HOME": str(tmp_path / "client")}
    assert run_cli(secured.url, "jobs", "list", env=viewer).returncode == 0
    refused = run_cli(secured.url, "projects", "create", "nope", env=viewer)
    assert refused.returncode == 1 and "installation-wide admin" in refused.stderr

    revoked = run_cli(secured.url, "tokens", "revoke", mine["id"], env=admin)
    assert revoked.returncode == 0, revoked.stderr
    after = run_cli(secured.url, "jobs", "list", env=viewer)
    assert after.returncode != 0 and "was revoked" in after.stderr


def test_without_a_token_the_cli_says_the_server_needs_one(secured, tmp_path):
    answer = run_cli(secured.url, "jobs", "list", env={"TRAINPLANE_HOME": str(tmp_path / "x")})
    assert answer.returncode != 0 and "needs an API token" in answer.stderr


@pytest.mark.parametrize(
    ("url", "given", "expected"),
    [
        ("http://127.0.0.1:8080", None, "tp_local"),
        ("http://localhost:9000", None, "tp_local"),
        ("http://127.0.0.1:8080", "tp_given", "tp_given"),
        # The local token never goes to another machine.
        ("https://trainplane.example.com", None, None),
    ],
)
def test_the_cli_sends_the_local_token_only_to_this_machine(
    tmp_path, monkeypatch, url, given, expected
):
    monkeypatch.setenv("TRAINPLANE_HOME", str(tmp_path))
    (tmp_path / "token").write_text("tp_local\n")
    assert token_for(url, given) == expected


def test_no_local_token_file_means_no_token(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPLANE_HOME", str(tmp_path / "empty"))
    assert token_for("http://127.0.0.1:8080", None) is None


def test_projects_update_sets_and_removes_quotas(secured, tmp_path):
    admin = {"TRAINPLANE_TOKEN": BOOTSTRAP, "TRAINPLANE_HOME": str(tmp_path / "client")}
    quota = ("--max-gpus", "8", "--gpu-hours-per-month", "500", "--weight", "3")
    set_ = run_cli(secured.url, "projects", "update", "default", *quota, env=admin)
    assert set_.returncode == 0, set_.stderr
    assert set_.stdout.strip() == "default: max GPUs 8, GPU-hours per month 500.0, weight 3"
    cleared = run_cli(secured.url, "projects", "update", "default", "--no-gpu-limit", env=admin)
    assert cleared.stdout.strip() == (
        "default: max GPUs no limit, GPU-hours per month 500.0, weight 3"
    )
    empty = run_cli(secured.url, "projects", "update", "default", env=admin)
    assert empty.returncode == 2 and "nothing to change" in empty.stderr
