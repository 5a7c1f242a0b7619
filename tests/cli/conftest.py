"""The CLI's fixtures: a real ``trainplane server`` per test (on each database
backend), the CLI in-process (typer's runner) or as the installed command in
a process of its own, and an environment with no CI variables in it, so the
tests behave the same on a laptop and inside a CI pipeline."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from trainplane.cli.ci import CI_SYSTEMS, GENERIC_VARIABLE
from trainplane.cli.main import app
from trainplane.testing.server import ServerProcess, ServiceProcess

TRAINPLANE = Path(sys.executable).with_name("trainplane")

SPEC = {
    "kind": "train",
    "name": "cli-job",
    "entrypoint": {"command": ["python", "train.py"], "working_dir": "code"},
    "resources": {"gpus": 2},
}

# Every variable the CLI reads to derive an idempotency key or to pace its output.
CI_VARIABLES = sorted(
    {GENERIC_VARIABLE, "TRAINPLANE_PROGRESS_INTERVAL", "TRAINPLANE_TOKEN", "TRAINPLANE_URL"}
    | {system.marker for system in CI_SYSTEMS}
    | {name for system in CI_SYSTEMS for name in system.variables}
)


@pytest.fixture(autouse=True)
def _outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    # The suite itself may run in GitHub Actions or GitLab CI: without this,
    # every submit would derive the same key from the suite's own pipeline.
    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without CI variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in CI_VARIABLES}
    return {**env, **extra}


def run_cli(
    url: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """The installed command, as a CI step runs it: its own process, stdout
    and stderr pipes (not a terminal)."""
    return subprocess.run(
        [str(TRAINPLANE), *args],
        env=clean_env(TRAINPLANE_URL=url, **(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def server(settings, tmp_path):
    env = {
        "TRAINPLANE_DATABASE_URL": settings.resolved_database_url,
        "TRAINPLANE_HOME": str(tmp_path / "home"),
    }
    with ServerProcess(env, log_path=tmp_path / "server.log") as process:
        yield process


BOOTSTRAP = "a-bootstrap-token-for-cli-tests"


@pytest.fixture
def secured(settings, tmp_path):
    """A server whose first token is ``BOOTSTRAP``, an admin of every project."""
    env = {
        "TRAINPLANE_DATABASE_URL": settings.resolved_database_url,
        "TRAINPLANE_HOME": str(tmp_path / "home"),
        "TRAINPLANE_BOOTSTRAP_TOKEN": BOOTSTRAP,
    }
    with ServerProcess(env, log_path=tmp_path / "server.log") as process:
        yield process


def cli_for(server: ServerProcess):
    """The CLI, in this process, against ``server``."""
    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(app, ["--url", server.url, *args], catch_exceptions=False)

    return run


@pytest.fixture
def cli(server):
    return cli_for(server)


@pytest.fixture
def spec_file(tmp_path):
    """SPEC in a file, beside the code folder it names (which a submit to
    ``trainplane server`` uploads)."""
    folder = tmp_path / "job"
    (folder / "code").mkdir(parents=True)
    (folder / "code" / "train.py").write_text("print('training')\n")
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return path


def on_sqlite(kind: type[ServiceProcess], template: Path, home: Path) -> ServiceProcess:
    """A server of ``kind`` on a fresh SQLite copy of ``template``, in ``home``."""
    shutil.copyfile(template, home / "trainplane.db")
    env = {
        "TRAINPLANE_DATABASE_URL": f"sqlite:///{home / 'trainplane.db'}",
        "TRAINPLANE_HOME": str(home),
    }
    return kind(env, log_path=home / "server.log")


@pytest.fixture(scope="module")
def shared_server(_sqlite_template, tmp_path_factory) -> Iterator[ServiceProcess]:
    """One SQLite server per module, for what does not depend on the database."""
    home = tmp_path_factory.mktemp("shared-server")
    with on_sqlite(ServerProcess, _sqlite_template, home) as process:
        yield process


@pytest.fixture
def shared_cli(shared_server):
    return cli_for(shared_server)


def job_ids(server) -> list[str]:
    items = httpx.get(f"{server.url}/v1/jobs", params={"limit": 200}, timeout=10).json()["items"]
    return [j["id"] for j in items]


class LocalUserServer(ServiceProcess):
    """The API as ``trainplane up`` serves it on loopback, where the one local
    user's specs may name their own files (``create_local_user_app``);
    without up's Ray head and scheduler, which nothing here needs."""

    name = "local-user API"
    ready_path = "/readyz"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "uvicorn",
            "trainplane.api.app:create_local_user_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--log-level",
            "warning",
        ]


@pytest.fixture(scope="module")
def local_user_server(_sqlite_template, tmp_path_factory) -> Iterator[ServiceProcess]:
    home = tmp_path_factory.mktemp("local-user-server")
    with on_sqlite(LocalUserServer, _sqlite_template, home) as process:
        yield process
