"""``trainplane secrets``: the installed command against a real server with a
bootstrap token. Values come from standard input or a file, never an
argument, and no command prints one."""

from __future__ import annotations

import json
import subprocess

from sqlalchemy import select

from tests.cli.conftest import BOOTSTRAP, TRAINPLANE, clean_env, run_cli
from trainplane.db.access_models import ProjectSecret
from trainplane.services.attempt_tokens import TokenKey
from trainplane.services.secret_box import SecretBox

VALUE = "cli-secret-value-51de"


def _cli(server, *args, stdin="", token=BOOTSTRAP):
    return subprocess.run(
        [str(TRAINPLANE), *args],
        env=clean_env(TRAINPLANE_URL=server.url, TRAINPLANE_TOKEN=token),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _stored(session, key):
    """The value the server stored under ``key`` of project default."""
    with session.begin():
        row = session.scalars(select(ProjectSecret).where(ProjectSecret.key == key)).one()
    return SecretBox(TokenKey(None).get(session)).open(row.project_id, key, row.ciphertext)


def test_secrets_are_set_from_stdin_or_a_file_listed_and_deleted(secured, session, tmp_path):
    piped = _cli(secured, "secrets", "set", "default", "hf-token", stdin=VALUE + "\n")
    assert piped.returncode == 0, piped.stderr
    assert _stored(session, "hf-token") == VALUE  # echo's newline is not part of it
    file = tmp_path / "key.pem"
    file.write_text("line one\nline two\n")
    from_file = _cli(secured, "secrets", "set", "default", "tls.key", "--from-file", str(file))
    assert from_file.returncode == 0, from_file.stderr
    assert _stored(session, "tls.key") == "line one\nline two\n"  # a file, as it is

    listed = _cli(secured, "secrets", "list", "default")
    assert listed.returncode == 0
    assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == ["hf-token", "tls.key"]
    as_json = json.loads(_cli(secured, "secrets", "list", "default", "--json").stdout)
    assert {s["key"] for s in as_json} == {"hf-token", "tls.key"}
    for result in (piped, from_file, listed):
        assert VALUE not in result.stdout + result.stderr

    deleted = _cli(secured, "secrets", "delete", "default", "hf-token")
    assert deleted.returncode == 0 and "deleted" in deleted.stderr
    again = _cli(secured, "secrets", "delete", "default", "hf-token")
    assert again.returncode == 1 and "no secret 'hf-token'" in again.stderr


def test_a_bad_key_is_a_usage_error_and_a_viewer_is_refused(secured):
    bad = _cli(secured, "secrets", "set", "default", "Bad Key", stdin="v")
    assert bad.returncode == 2 and "key" in bad.stderr
    created = run_cli(
        secured.url,
        *("tokens", "create", "watcher", "--project", "default", "--role", "viewer"),
        env={"TRAINPLANE_TOKEN": BOOTSTRAP},
    )
    viewer = created.stdout.strip()
    refused = _cli(secured, "secrets", "set", "default", "k", stdin="v", token=viewer)
    assert refused.returncode == 1 and "admin role" in refused.stderr
    listing = _cli(secured, "secrets", "list", "default", token=viewer)
    assert listing.returncode == 1 and "member role" in listing.stderr
