"""``trainplane tokens create NAME --admin``: on the server's machine, straight
in the database, with no server running and no token: the way back in for an
operator who lost every admin token, and a first token without a bootstrap
token. The installed command in its own process; the API in-process after."""

from __future__ import annotations

import getpass
import json
import stat

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from tests.cli.conftest import run_cli
from trainplane.api.app import create_app

BOOTSTRAP = "a-bootstrap-token-lost-later"
# Nothing listens there: the command must not need a server.
NO_SERVER = "http://127.0.0.1:9"


def _as(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_an_operator_who_lost_every_admin_token_gets_back_in(settings, tmp_path):
    with TestClient(
        create_app(settings.model_copy(update={"bootstrap_token": SecretStr(BOOTSTRAP)}))
    ) as api:
        team = api.post(
            "/v1/tokens",
            json={"name": "team-admin", "project": "default", "role": "admin"},
            headers=_as(BOOTSTRAP),
        ).json()["token"]
        whoami = api.get("/v1/whoami", headers=_as(BOOTSTRAP)).json()
        assert (
            api.delete(f"/v1/tokens/{whoami['token_id']}", headers=_as(BOOTSTRAP)).status_code
            == 204
        )
        # Only a project's admin is left: nobody may administer the installation.
        assert api.post("/v1/projects", json={"name": "new"}, headers=_as(team)).status_code == 403

    env = {
        "TRAINPLANE_DATABASE_URL": settings.resolved_database_url,
        "TRAINPLANE_HOME": str(tmp_path / "server-home"),
    }
    made = run_cli(NO_SERVER, "tokens", "create", "rescue", "--admin", env=env)
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("tp_") and "keep the secret now" in made.stderr

    with TestClient(create_app(settings)) as api:
        me = api.get("/v1/whoami", headers=_as(secret)).json()
        assert (me["subject"], me["everywhere"]) == ("rescue", "admin")
        assert (
            api.post("/v1/projects", json={"name": "new"}, headers=_as(secret)).status_code == 201
        )
        trail = api.get("/v1/audit", headers=_as(secret)).json()["items"]
    made_here = [e for e in trail if e["action"] == "token.create" and e["target"] == "rescue"]
    assert len(made_here) == 1
    event = made_here[0]
    assert event["detail"]["via"] == "database" and event["detail"]["role"] == "admin"
    assert event["actor"].startswith(getpass.getuser() + "@")


def test_a_fresh_installation_gets_its_first_token_and_a_private_database(tmp_path):
    home = tmp_path / "fresh-home"
    made = run_cli(
        NO_SERVER,
        *("tokens", "create", "first", "--admin", "--expires-in", "30d", "--json"),
        env={"TRAINPLANE_HOME": str(home)},
    )
    assert made.returncode == 0, made.stderr
    record = json.loads(made.stdout)
    assert record["name"] == "first" and record["token"].startswith("tp_") and record["expires_at"]
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "trainplane.db").stat().st_mode) == 0o600


@pytest.mark.parametrize("extra", [("--project", "default"), ("--role", "viewer"), ("--service",)])
def test_admin_takes_no_project_role_or_kind(tmp_path, extra):
    refused = run_cli(
        NO_SERVER,
        *("tokens", "create", "x", "--admin", *extra),
        env={"TRAINPLANE_HOME": str(tmp_path / "home")},
    )
    assert refused.returncode == 2 and "installation-wide admin" in refused.stderr
    assert not (tmp_path / "home").exists()  # refused before touching anything
