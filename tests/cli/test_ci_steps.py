"""A CI step's submission against a real ``trainplane server`` on each database
backend: idempotency keys from CI variables (a retried step finds its job),
``--output json``, usage errors before anything is submitted, the token, and
waiting through a server that goes away. No cluster is registered, so jobs
stay QUEUED: these tests are about the submission, not the run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import pytest
import yaml

from tests.cli.ci_env import GITHUB, GITLAB
from tests.cli.conftest import TRAINPLANE, clean_env, job_ids, run_cli
from trainplane.cli.common import (
    EXIT_CANCELLED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from trainplane.testing.server import ServerProcess


@pytest.fixture
def sqlite_server(_sqlite_template, tmp_path) -> Iterator[ServerProcess]:
    """A server of this test's own on SQLite, for what does not depend on the
    database (the idempotency tests run on each backend)."""
    db = tmp_path / "trainplane.db"
    shutil.copyfile(_sqlite_template, db)
    env = {"TRAINPLANE_DATABASE_URL": f"sqlite:///{db}", "TRAINPLANE_HOME": str(tmp_path)}
    with ServerProcess(env, log_path=tmp_path / "server.log") as process:
        yield process


def submitted(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == EXIT_OK, run.stderr
    return run.stdout.strip()


def test_a_rerun_github_step_finds_its_job_and_a_new_run_starts_another(server, spec_file):
    first = run_cli(server.url, "submit", str(spec_file), env=GITHUB)
    job = submitted(first)
    key = re.search(r"^idempotency key (ci-github-9001-[0-9a-f]{32}) \(from ", first.stderr, re.M)
    assert key, first.stderr

    # "Re-run jobs": a new attempt of the same run and step.
    rerun = run_cli(server.url, "submit", str(spec_file), env={**GITHUB, "GITHUB_RUN_ATTEMPT": "2"})
    assert submitted(rerun) == job
    assert f"reusing job {job} (cli-job), submitted earlier with this idempotency key" in (
        rerun.stderr
    )
    assert key.group(1) in rerun.stderr

    next_run = submitted(
        run_cli(server.url, "submit", str(spec_file), env={**GITHUB, "GITHUB_RUN_ID": "9002"})
    )
    # A second, different submission in the same step is a job of its own.
    other_spec = submitted(
        run_cli(server.url, "submit", str(spec_file), "--set", "name=other", env=GITHUB)
    )
    opted_out = submitted(
        run_cli(server.url, "submit", str(spec_file), "--no-idempotency-key", env=GITHUB)
    )
    assert len({job, next_run, other_spec, opted_out}) == 4
    assert sorted(job_ids(server)) == sorted([job, next_run, other_spec, opted_out])


def test_a_retried_gitlab_job_finds_its_job(server, spec_file):
    job = submitted(run_cli(server.url, "submit", str(spec_file), env=GITLAB))
    retried = run_cli(server.url, "submit", str(spec_file), env={**GITLAB, "CI_JOB_ID": "5002"})
    assert submitted(retried) == job and "reusing job" in retried.stderr
    new_pipeline = {**GITLAB, "CI_PIPELINE_ID": "778"}
    assert submitted(run_cli(server.url, "submit", str(spec_file), env=new_pipeline)) != job
    assert len(job_ids(server)) == 2


def test_outside_ci_every_submission_is_a_new_job(shared_server, spec_file):
    runs = [run_cli(shared_server.url, "submit", str(spec_file)) for _ in range(2)]
    assert len({submitted(run) for run in runs}) == 2
    assert all("idempotency key" not in run.stderr for run in runs)


def test_a_found_job_that_already_ended_says_so_and_exits_with_its_outcome(cli, server, spec_file):
    env = {"TRAINPLANE_CI_RUN_ID": "nightly-17"}
    job = submitted(run_cli(server.url, "submit", str(spec_file), env=env))
    assert cli("jobs", "cancel", job).exit_code == 0
    again = run_cli(server.url, "submit", str(spec_file), "--wait", "--output", "json", env=env)
    assert again.returncode == EXIT_CANCELLED, again.stderr
    assert f"reusing job {job}" in again.stderr and "it ended already" in again.stderr
    result = json.loads(again.stdout)
    assert (result["id"], result["created"], result["status"]) == (job, False, "CANCELLED")
    assert result["idempotency_key"].startswith("ci-run-nightly-17-")


def test_submit_without_wait_prints_the_created_job_as_json(shared_cli, spec_file):
    result = shared_cli("submit", str(spec_file), "--output", "json")
    assert result.exit_code == EXIT_OK, result.output
    job = json.loads(result.stdout)
    assert (job["name"], job["status"], job["spec"]["resources"]["gpus"]) == (
        "cli-job",
        "QUEUED",
        2,
    )


def test_an_invalid_spec_is_one_json_object_naming_the_field_and_creates_nothing(
    shared_cli, shared_server, spec_file
):
    before = job_ids(shared_server)
    result = shared_cli(
        "submit", str(spec_file), "--wait", "--output", "json", "--set", "resources.gpus=0"
    )
    assert result.exit_code == EXIT_USAGE, result.output
    summary = json.loads(result.stdout)
    assert (summary["id"], summary["outcome"], summary["exit_code"]) == (None, "invalid", 2)
    assert [e["field"] for e in summary["errors"]] == ["resources.gpus"]
    assert "resources.gpus" in result.stderr
    assert job_ids(shared_server) == before


BAD_USAGE = [
    (["--fail-on", "eval_loss=>2"], "'eval_loss=>2' is not METRIC OP NUMBER"),
    (["--fail-on", "eval_loss>2", "--fail-on", "loss"], "'loss' is not METRIC OP NUMBER"),
    (["--idempotency-key", "k", "--no-idempotency-key"], "contradict"),
    (["--output", "xml"], "'xml' is not one of"),
    (["--set", "resources.gpus.x=1"], "resources.gpus is a number, so it has no field 'x'"),
]


def test_bad_usage_exits_2_naming_the_problem_before_anything_is_submitted(
    shared_cli, shared_server, spec_file
):
    before = job_ids(shared_server)
    for args, named in BAD_USAGE:
        result = shared_cli("submit", str(spec_file), "--wait", *args)
        assert result.exit_code == EXIT_USAGE, (args, result.output)
        assert named in " ".join(result.stderr.split()), result.stderr  # rich wraps lines
    assert job_ids(shared_server) == before


def test_the_wait_rides_out_a_server_restart(sqlite_server, spec_file):
    server = sqlite_server
    waiting = subprocess.Popen(
        [str(TRAINPLANE), "submit", str(spec_file), "--wait", "--reconnect-timeout", "60"],
        env=clean_env(TRAINPLANE_URL=server.url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        job = waiting.stdout.readline().strip()
        server.stop()
        time.sleep(3)  # at least one failed poll
        server.start()
        httpx.post(f"{server.url}/v1/jobs/{job}/cancel", timeout=10).raise_for_status()
        _, stderr = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == EXIT_CANCELLED, stderr
    assert "cannot reach trainplane" in stderr and "retrying for up to 60s" in stderr
    assert "the server answers again" in stderr


def test_a_server_gone_for_good_exits_6_after_the_reconnect_timeout(sqlite_server, spec_file):
    server = sqlite_server
    command = ["submit", str(spec_file), "--reconnect-timeout", "2", "--fail-on", "x>1"]
    waiting = subprocess.Popen(
        [str(TRAINPLANE), *command, "--output", "json"],
        env=clean_env(TRAINPLANE_URL=server.url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not job_ids(server) and time.monotonic() < deadline:
            time.sleep(0.2)  # until it has submitted (uploads first) and waits
        time.sleep(0.5)
        server.stop()
        stdout, stderr = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == EXIT_UNREACHABLE, stderr
    result = json.loads(stdout)
    assert (result["status"], result["outcome"]) == ("QUEUED", "unreachable")
    assert "cannot reach trainplane" in result["message"]


class _RecordingApi(BaseHTTPRequestHandler):
    """A fake of the API, and named so: the real server has no tokens yet, so
    only a fake can show what the CLI sends. It answers a submit and a read."""

    seen: ClassVar[list[tuple[str, str | None]]] = []
    JOB: ClassVar[dict[str, Any]] = {
        "id": "0" * 26,
        "name": "fake",
        "project": "default",
        "status": "QUEUED",
        "reason": "waiting",
        "progress": None,
        "latest_metrics": {"loss": 0.5},
        "tracking": {"status": "disabled", "experiment": "x", "run_id": None, "error": None},
        "registered_model": None,
    }

    def _answer(self, status: int, body: dict) -> None:
        self.seen.append((f"{self.command} {self.path}", self.headers.get("Authorization")))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self._answer(201, self.JOB)

    def do_GET(self) -> None:
        self._answer(200, {**self.JOB, "status": "SUCCEEDED", "reason": "done"})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_api() -> Iterator[str]:
    _RecordingApi.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _RecordingApi)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_the_token_goes_with_the_submission_and_every_wait(fake_api, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"kind": "train", "name": "fake"}))
    run = run_cli(fake_api, "submit", str(spec), "--wait", env={"TRAINPLANE_TOKEN": "tp_ci_secret"})
    assert run.returncode == EXIT_OK, run.stderr
    assert [what for what, _ in _RecordingApi.seen] == ["POST /v1/jobs", f"GET /v1/jobs/{'0' * 26}"]
    assert {token for _, token in _RecordingApi.seen} == {"Bearer tp_ci_secret"}
