"""A server beyond loopback needs auth: ``trainplane server --host 0.0.0.0`` on
an installation with no token refuses to start, saying how to fix it, unless
``--insecure-no-auth`` (then it warns every minute); with a token it starts.
Real ``trainplane server`` processes; the warning loop with a short period."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from trainplane.config import Settings
from trainplane.net import free_port
from trainplane.serve.exposure import is_loopback, warning_while_open
from trainplane.serve.processes import prepare_database
from trainplane.testing.server import ServerProcess, ServiceProcess

TRAINPLANE = Path(sys.executable).with_name("trainplane")
BOOTSTRAP = "a-bootstrap-token-for-exposure"


class OpenServer(ServiceProcess):
    """``trainplane server`` on every interface."""

    name = "trainplane server on 0.0.0.0"

    def __init__(self, env: dict[str, str], *args: str, log_path: Path) -> None:
        super().__init__(env, log_path=log_path)
        self.args = args

    def command(self) -> list[str]:
        where = ("--host", "0.0.0.0", "--port", str(self.port))
        return [str(TRAINPLANE), "server", *where, "--no-scheduler", *self.args]


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINPLANE_")}
    return {**env, "TRAINPLANE_HOME": str(home), **extra}


def test_a_server_on_every_interface_without_a_token_refuses_to_start(tmp_path):
    home = tmp_path / "home"
    started = time.monotonic()
    refused = subprocess.run(
        [str(TRAINPLANE), "server", "--host", "0.0.0.0", "--port", str(free_port())],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1, refused.stdout + refused.stderr
    said = refused.stderr
    assert "no API token" in said and "0.0.0.0" in said
    for fix in ("TRAINPLANE_BOOTSTRAP_TOKEN", "trainplane tokens create NAME --admin"):
        assert fix in said
    assert time.monotonic() - started < 30


def test_insecure_no_auth_starts_it_and_warns(tmp_path):
    with OpenServer(_env(tmp_path / "home"), "--insecure-no-auth", log_path=tmp_path / "log"):
        pass  # it answered /healthz on 127.0.0.1, through 0.0.0.0
    log = (tmp_path / "log").read_text()
    assert "WITHOUT AUTHENTICATION" in log and "--insecure-no-auth" in log


@pytest.mark.parametrize("how", ["bootstrap token", "token made with --admin"])
def test_with_a_token_it_starts_and_asks_for_it(tmp_path, how):
    home = tmp_path / "home"
    if how == "bootstrap token":
        env = _env(home, TRAINPLANE_BOOTSTRAP_TOKEN=BOOTSTRAP)
    else:
        env = _env(home)
        made = subprocess.run(
            [str(TRAINPLANE), "tokens", "create", "ops", "--admin"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert made.returncode == 0, made.stderr
    with OpenServer(env, log_path=tmp_path / "log") as server:
        assert httpx.get(f"{server.url}/v1/jobs", timeout=10).status_code == 401
    assert "WITHOUT AUTHENTICATION" not in (tmp_path / "log").read_text()


def test_loopback_without_a_token_starts_as_before(tmp_path):
    with ServerProcess(_env(tmp_path / "home"), args=("--no-scheduler",)) as server:
        assert httpx.get(f"{server.url}/v1/jobs", timeout=10).status_code == 200


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("no-such-host.invalid", False),
    ],
)
def test_what_counts_as_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_the_warning_repeats_until_the_installation_has_a_token(tmp_path, caplog):
    settings = Settings(home=tmp_path / "home", auto_migrate=True)
    prepare_database(settings)
    caplog.set_level(logging.WARNING, logger="trainplane")
    with warning_while_open(settings, "0.0.0.0", every=0.2) as thread:
        assert thread is not None
        time.sleep(0.7)
        warned = [r for r in caplog.records if "WITHOUT AUTHENTICATION" in r.getMessage()]
        assert len(warned) >= 3
        made = subprocess.run(
            [str(TRAINPLANE), "tokens", "create", "ops", "--admin"],
            env=_env(settings.home),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert made.returncode == 0, made.stderr
        thread.join(5)
        assert not thread.is_alive()  # auth is on: nothing left to warn about
    with warning_while_open(settings, "0.0.0.0") as thread:
        assert thread is None
