"""``trainplane up`` as a user starts it, a process of its own with its own
local Ray head: its token stays in the token file (0600, in a 0700 home)
and never reaches its log, which says where the token is and where to
paste it instead; the API asks for it. On loopback it takes the local
user's own folders in specs, never its home."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import httpx
import pytest

from trainplane.testing.server import ServiceProcess

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

TRAINPLANE = Path(sys.executable).with_name("trainplane")


class Up(ServiceProcess):
    name = "trainplane up"
    ready_path = "/readyz"

    def command(self) -> list[str]:
        where = ("--host", "127.0.0.1", "--port", str(self.port))
        return [str(TRAINPLANE), "up", *where, "--slots", "1", "--cpu", "--log-level", "info"]


def test_up_keeps_its_token_out_of_the_log(tmp_path):
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINPLANE_")}
    env.update(TRAINPLANE_HOME=str(home), TRAINPLANE_TRACKING_ENABLED="false")
    log = tmp_path / "up.log"
    with Up(env, log_path=log).start(timeout=240) as up:
        token = (home / "token").read_text().strip()
        assert httpx.get(f"{up.url}/v1/jobs", timeout=10).status_code == 401
        signed = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{up.url}/v1/jobs", headers=signed, timeout=10).status_code == 200
        # On loopback, the local user's own folders are theirs to name.
        me = httpx.get(f"{up.url}/v1/whoami", headers=signed, timeout=10).json()
        assert me["server"]["local_paths"] is True
        code = tmp_path / "code"
        code.mkdir()
        spec = {
            "kind": "train",
            "name": "local-folder",
            "entrypoint": {"command": ["true"], "working_dir": str(code)},
        }
        plan = httpx.post(f"{up.url}/v1/jobs/plan", json=spec, headers=signed, timeout=30)
        assert plan.status_code == 200, plan.text
        inside_home = {**spec, "entrypoint": {"command": ["true"], "working_dir": str(home)}}
        refused = httpx.post(f"{up.url}/v1/jobs/plan", json=inside_home, headers=signed, timeout=30)
        assert refused.status_code == 422 and "entrypoint.working_dir" in refused.text
    said = log.read_text()
    assert token.startswith("tp_") and token not in said
    assert "login?token" not in said
    assert str(home / "token") in said and f"{up.url}/login" in said
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "token").stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "trainplane.db").stat().st_mode) == 0o600
