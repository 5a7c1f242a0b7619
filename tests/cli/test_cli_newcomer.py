"""What a newcomer meets first: jobs by name or id prefix, ``--output`` in
every format, global options after the verb, ``init`` then ``plan``, ``login``
and its config file, and messages (with their exit codes) where the CLI used
to print nothing."""

from __future__ import annotations

import json
import stat

import yaml

from tests.cli.conftest import run_cli
from trainplane.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from trainplane.cli.init_spec import Kind, template
from trainplane.cli.main import hoisted
from trainplane.jobs.spec import parse_spec
from trainplane.sdk.config_file import ClientConfig, read_config, resolve_connection


def test_jobs_by_name_and_prefix_and_the_silences_turned_into_messages(shared_cli, spec_file):
    empty = shared_cli("clusters", "list")
    assert empty.exit_code == EXIT_OK and "no clusters registered" in empty.stderr
    first = shared_cli("submit", str(spec_file), "--set", "name=newcomer-a").stdout.strip()
    latest = shared_cli("submit", str(spec_file), "--set", "name=newcomer-a").stdout.strip()

    by_name = json.loads(shared_cli("jobs", "get", "newcomer-a", "-o", "json").stdout)
    assert by_name["id"] == latest
    # Unique prefixes: the two ids share their first 8 or so characters (the time).
    prefix = first[:14]
    by_prefix = yaml.safe_load(shared_cli("jobs", "get", prefix, "--output", "yaml").stdout)
    assert by_prefix["id"] == first
    table = shared_cli("jobs", "get", prefix).stdout
    spec = table.split("\nspec:\n", 1)[1]
    # The spec as YAML, without the fields left unset; a command job has no strategy line.
    assert "  kind: train\n" in spec and "null" not in spec
    assert "GPUs, ddp" not in table
    events = yaml.safe_load(shared_cli("jobs", "events", "newcomer-a", "-o", "yaml").stdout)
    assert [e["to_status"] for e in events] == ["QUEUED"]

    logs = shared_cli("jobs", "logs", "newcomer-a")
    assert logs.exit_code == EXIT_OK and logs.stdout == "" and "has not started" in logs.stderr
    unknown = shared_cli("jobs", "list", "--project", "nope")
    assert unknown.exit_code == EXIT_FAILED and "project 'nope' does not exist" in unknown.stderr
    assert shared_cli("jobs", "get", "no-such-job").exit_code == EXIT_FAILED

    assert shared_cli("jobs", "cancel", "newcomer-a").exit_code == EXIT_OK
    again = shared_cli("jobs", "cancel", latest[:14], "-o", "json")
    assert again.exit_code == EXIT_OK and "already cancelled" in again.stderr
    assert json.loads(again.stdout)["status"] == "CANCELLED"
    listed = yaml.safe_load(shared_cli("jobs", "list", "-p", "default", "-o", "yaml").stdout)
    assert {first, latest} <= {job["id"] for job in listed}


def test_global_options_after_the_verb_a_bad_url_and_the_version(shared_server):
    assert hoisted(["jobs", "list", "--url", "http://h:1", "-o", "json"]) == [
        "--url",
        "http://h:1",
        "jobs",
        "list",
        "-o",
        "json",
    ]
    assert hoisted(["submit", "f.yaml", "--token=t", "--", "--url"]) == [
        "--token=t",
        "submit",
        "f.yaml",
        "--",
        "--url",
    ]
    # The installed command, as a user types it: --url after the verb, --output before.
    after = run_cli(
        "http://127.0.0.1:9", "-o", "json", "projects", "list", "--url", shared_server.url
    )
    assert after.returncode == EXIT_OK, after.stderr
    assert {p["name"] for p in json.loads(after.stdout)} >= {"default"}
    no_scheme = run_cli(shared_server.url.removeprefix("http://"), "jobs", "list")
    assert no_scheme.returncode == EXIT_USAGE
    assert "TRAINPLANE_URL" in no_scheme.stderr and "http://" in no_scheme.stderr
    version = run_cli(shared_server.url, "--version")
    assert version.returncode == EXIT_OK and version.stdout.startswith("trainplane 0.")


def test_init_writes_specs_that_parse_and_plan(shared_cli, tmp_path, monkeypatch):
    for kind in Kind:
        parse_spec(yaml.safe_load(template(kind, f"my-{kind.value}")))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hello')\n")
    assert shared_cli("init").exit_code == EXIT_OK
    assert shared_cli("init").exit_code == EXIT_USAGE  # never overwrites without --force
    planned = shared_cli("plan", "job.yaml", "-o", "json")
    assert planned.exit_code == EXIT_OK, planned.output
    assert json.loads(planned.stdout)["valid"] is True
    assert shared_cli("init", "sweep", "--file", "sweep.yaml").exit_code == EXIT_OK
    assert shared_cli("plan", "sweep.yaml").exit_code == EXIT_OK


def test_login_saves_a_private_config_the_cli_and_sdk_read(shared_server, tmp_path, monkeypatch):
    path = tmp_path / "conf" / "config.yaml"
    env = {"TRAINPLANE_CONFIG": str(path)}
    refused = run_cli(shared_server.url, "login", "example.com", env=env)
    assert refused.returncode == EXIT_USAGE and not path.exists()
    done = run_cli(
        shared_server.url, "login", shared_server.url, "--token", "secret-1", "--no-check", env=env
    )
    assert done.returncode == EXIT_OK, done.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_config(path) == ClientConfig(shared_server.url, "secret-1")

    monkeypatch.setenv("TRAINPLANE_CONFIG", str(path))
    monkeypatch.delenv("TRAINPLANE_URL", raising=False)
    monkeypatch.delenv("TRAINPLANE_TOKEN", raising=False)
    # flags > environment > the config file; its token goes to its URL only.
    assert resolve_connection(None, None, "http://x:1")[:2] == (shared_server.url, "secret-1")
    assert resolve_connection(None, "mine", "http://x:1")[:2] == (shared_server.url, "mine")
    monkeypatch.setenv("TRAINPLANE_URL", "https://elsewhere.example")
    assert resolve_connection(None, None, "http://x:1")[:2] == ("https://elsewhere.example", None)
    assert resolve_connection("https://flag.example", None, "http://x:1")[0] == (
        "https://flag.example"
    )
