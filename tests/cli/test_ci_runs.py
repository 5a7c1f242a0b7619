"""``trainplane submit --wait`` as a CI step runs it: the installed command in
a process of its own (stderr a pipe, not a terminal) against a real ``trainplane
server`` that runs the jobs on the local Ray cluster. One server for the module
(SQLite; the database backends have the per-test server's tests); each job
reports a few steps in a few seconds (``ci_job/report.py``)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.cli.conftest import TRAINPLANE, clean_env, run_cli
from tests.cli.slim_client import SERVER_SIDE, install_client, installed
from tests.factories import EXAMPLES
from trainplane.backends.local_ray import LocalRayHead
from trainplane.cli.common import (
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_THRESHOLD,
    EXIT_USAGE,
)
from trainplane.db import migrate
from trainplane.net import free_port
from trainplane.testing.clusters import register_local_cluster
from trainplane.testing.server import ServerProcess

JOB_CODE = Path(__file__).resolve().parent / "ci_job"
ANSI = re.compile(r"\x1b\[")


@pytest.fixture(scope="module")
def ci_server(ray_head: LocalRayHead, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("ci-server")
    db = f"sqlite:///{home / 'trainplane.db'}"
    migrate.upgrade(db)
    register_local_cluster(db, ray_head.address, slots=2)
    port = free_port()
    env = {
        "TRAINPLANE_DATABASE_URL": db,
        "TRAINPLANE_HOME": str(home),
        "TRAINPLANE_ADVERTISE_URL": f"http://127.0.0.1:{port}",
        "TRAINPLANE_SCHEDULER_POLL_SECONDS": "0.5",
        # Tracking has its own end-to-end tests; here it would only add MLflow.
        "TRAINPLANE_TRACKING_ENABLED": "false",
    }
    with ServerProcess(env, port=port, log_path=home / "server.log") as server:
        yield server.url


def job_file(tmp_path: Path, name: str, **env: Any) -> Path:
    spec = {
        "kind": "train",
        "name": name,
        "entrypoint": {
            "command": ["python", "report.py"],
            "working_dir": str(JOB_CODE),
            "env": {key: str(value) for key, value in env.items()},
        },
        "resources": {"gpus": 1},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_succeeded_job_exits_0_with_plain_progress_lines_and_a_json_result(ci_server, tmp_path):
    spec = job_file(tmp_path, "ci-ok", STEPS=6, STEP_SLEEP=0.7, EVAL_LOSS=1.5)
    run = run_cli(
        ci_server,
        "submit",
        str(spec),
        "--fail-on",
        "eval_loss>2.0",
        "--output",
        "json",
        env={"TRAINPLANE_PROGRESS_INTERVAL": "1"},
    )
    assert run.returncode == EXIT_OK, run.stderr
    log = run.stderr
    assert "\r" not in log and not ANSI.search(log)
    assert re.search(r"^job \w{26} RUNNING: ", log, re.M), log
    progress = re.findall(r"^step (\d)/6 \(\d+%\) loss=[\d.]+.*$", log, re.M)
    assert len(progress) >= 2, log
    assert re.search(r"^step \d/6 .* steps/s ETA \d+s$", log, re.M), log
    assert "gate eval_loss>2.0: eval_loss=1.5: passed" in log
    assert log.rstrip().endswith("exit code 0: succeeded (and every --fail-on gate passed)")

    result = json.loads(run.stdout)  # stdout holds the JSON and nothing else
    assert (result["status"], result["exit_code"], result["outcome"]) == (
        "SUCCEEDED",
        0,
        "succeeded",
    )
    assert result["metrics"] == {"loss": pytest.approx(2.0 / 6, abs=1e-3), "eval_loss": 1.5}
    assert result["thresholds"] == [
        {
            "expression": "eval_loss>2.0",
            "metric": "eval_loss",
            "operator": ">",
            "threshold": 2.0,
            "value": 1.5,
            "passed": True,
            "message": "eval_loss=1.5: passed (fails when eval_loss>2.0)",
        }
    ]
    assert result["progress"]["step"] == result["progress"]["total_steps"] == 6
    assert result["tracking"]["status"] == "disabled" and result["registered_model"] is None
    assert result["url"] == f"{ci_server}/jobs/{result['id']}"
    assert result["created"] is True and result["idempotency_key"] is None


def test_a_metric_over_its_threshold_exits_4_and_a_missing_metric_fails_its_gate(
    ci_server, tmp_path
):
    spec = job_file(tmp_path, "ci-regressed", STEPS=2, STEP_SLEEP=0.2, EVAL_LOSS=2.5)
    gates = ["eval_loss>2.0", "perplexity>=12", "loss<0"]
    run = run_cli(
        ci_server, "submit", str(spec), *(f"--fail-on={g}" for g in gates), "--output", "json"
    )
    assert run.returncode == EXIT_THRESHOLD, run.stderr
    result = json.loads(run.stdout)
    assert result["status"] == "SUCCEEDED" and result["outcome"] == "threshold_failed"
    verdicts = {t["expression"]: (t["value"], t["passed"]) for t in result["thresholds"]}
    assert verdicts == {
        "eval_loss>2.0": (2.5, False),
        "perplexity>=12": (None, False),
        "loss<0": (1.0, True),
    }
    assert "gate perplexity>=12: failed: perplexity was never reported" in run.stderr
    assert "exit code 4: the job succeeded but a --fail-on gate failed" in run.stderr
    assert result["message"] == (
        "gate eval_loss>2.0: eval_loss=2.5: failed (fails when eval_loss>2.0); "
        "gate perplexity>=12: failed: perplexity was never reported, so the gate cannot pass"
    )


def test_a_failed_job_exits_1_with_its_log_on_stderr_and_its_gates_not_checked(ci_server, tmp_path):
    spec = job_file(tmp_path, "ci-fails", STEPS=1, STEP_SLEEP=0, EXIT_CODE=1)
    run = run_cli(
        ci_server, "submit", str(spec), "--follow", "--fail-on", "loss>9", "--output", "json"
    )
    assert run.returncode == EXIT_FAILED, run.stderr
    result = json.loads(run.stdout)  # the job's log went to stderr, not into the JSON
    assert (result["status"], result["outcome"]) == ("FAILED", "failed")
    assert result["thresholds"][0]["passed"] is None
    assert "not checked: the job is FAILED" in result["thresholds"][0]["message"]
    assert "step 1 {'loss': 2.0}" in run.stderr
    assert re.search(rf"job {result['id']} FAILED: .*exit code 1", run.stderr), run.stderr


def test_a_job_cancelled_while_the_step_waits_exits_3(ci_server, tmp_path):
    spec = job_file(tmp_path, "ci-cancelled", STEPS=200, STEP_SLEEP=0.5)
    waiting = subprocess.Popen(
        [str(TRAINPLANE), "submit", str(spec), "--wait"],
        env=clean_env(TRAINPLANE_URL=ci_server),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        job_id = waiting.stdout.readline().strip()  # the id comes first, at once
        http = httpx.Client(base_url=ci_server, timeout=10)
        deadline = time.monotonic() + 60
        while http.get(f"/v1/jobs/{job_id}").json()["status"] != "RUNNING":
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.3)
        # Another client (a person, another pipeline) cancels it.
        assert http.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        _, stderr = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == EXIT_CANCELLED, stderr
    assert re.search(rf"job {job_id} CANCELLED: ", stderr), stderr
    assert "exit code 3: the job was cancelled" in stderr


def test_the_ci_fine_tune_example_runs_against_a_remote_server(ci_server, tmp_path):
    """examples/ci's step, as its pipelines run it: the runner holds the base
    model and datasets, the server reads none of its files, so they go up to
    the project's storage (once) and the job trains from there."""
    from trainplane.testing.tiny_models import build_tiny_llama

    example = tmp_path / "finetune"
    shutil.copytree(EXAMPLES / "finetune", example)
    build_tiny_llama(example / "tiny-llama")  # what make_base_model.py does
    run = run_cli(
        ci_server,
        "submit",
        str(example / "job.yaml"),
        "--set",
        "hyperparameters.max_steps=10",
        "--wait",
        "--fail-on",
        "eval_loss>6",
        "--output",
        "json",
        timeout=900,
    )
    assert run.returncode == EXIT_OK, run.stderr
    for field in ("base_model", "dataset.train", "dataset.eval"):
        assert f"uploaded {field} {example}" in run.stderr, run.stderr
    result = json.loads(run.stdout)
    assert result["status"] == "SUCCEEDED" and result["metrics"]["eval_loss"] < 6
    spec = httpx.get(f"{ci_server}/v1/jobs/{result['id']}", timeout=10).json()["spec"]
    assert "/checkpoints/default/inputs/" in spec["base_model"]
    assert spec["dataset"]["train"].endswith("/train.jsonl")

    # The pipeline's retry: the same files are on the server; only the spec goes.
    plan = run_cli(ci_server, "plan", str(example / "job.yaml"))
    assert plan.returncode == EXIT_OK, plan.stderr
    assert "uploaded" not in plan.stderr and plan.stderr.count("has it already") == 3


def test_the_client_alone_installs_few_packages_and_runs_a_ci_step(ci_server, tmp_path):
    """``pip install trainplane`` on a CI runner: the client only, which submits,
    waits and checks gates against a real server."""
    bin_dir = install_client(tmp_path)
    packages = installed(bin_dir)
    assert len(packages) < 25, sorted(packages)
    assert not packages & SERVER_SIDE, sorted(packages & SERVER_SIDE)

    spec = job_file(tmp_path, "ci-slim", STEPS=2, STEP_SLEEP=0.2, EVAL_LOSS=2.5)
    gate = ("--fail-on", "eval_loss>2.0")
    run = subprocess.run(
        [str(bin_dir / "trainplane"), "submit", str(spec), *gate, "--output", "json"],
        env=clean_env(TRAINPLANE_URL=ci_server),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == EXIT_THRESHOLD, run.stderr
    result = json.loads(run.stdout)
    assert result["status"] == "SUCCEEDED" and result["thresholds"][0]["value"] == 2.5

    # The server's verbs say which extra they need instead of failing on an import.
    server = subprocess.run(
        [str(bin_dir / "trainplane"), "server"], capture_output=True, text=True, timeout=60
    )
    assert server.returncode == EXIT_USAGE
    assert "pip install 'trainplane[server]'" in server.stderr
