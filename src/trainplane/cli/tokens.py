"""``tokens create|list|revoke``: API tokens and their roles."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from trainplane.cli.common import State, call, say

tokens_app = typer.Typer(no_args_is_help=True, help="API tokens for people and CI pipelines.")


@tokens_app.command("create")
def tokens_create(
    name: Annotated[str, typer.Argument(help="Names the caller in job and audit events.")],
    project: Annotated[
        str | None, typer.Option(help="The project of the role; omit for every project.")
    ] = None,
    role: Annotated[str, typer.Option(help="viewer, member or admin.")] = "member",
    service: Annotated[
        bool, typer.Option("--service", help="For a CI pipeline or another program.")
    ] = False,
    expires_in: Annotated[
        str | None, typer.Option(help="30d, 12h, ...; default: never expires.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole record.")] = False,
) -> None:
    """Create a token; prints its secret, which is shown only this once."""
    body = {
        "name": name,
        "project": project,
        "role": role,
        "kind": "service" if service else "user",
        "expires_in": expires_in,
    }
    created = call(State.client().post, "/v1/tokens", body)
    if as_json:
        typer.echo(json.dumps(created, indent=2))
        return
    say(f"token {created['id']} ({role} in {project or 'every project'}); keep the secret now:")
    typer.echo(created["token"])


@tokens_app.command("list")
def tokens_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The tokens of the projects you administer (never their secrets)."""
    items = call(State.client().get, "/v1/tokens")["items"]
    if as_json:
        typer.echo(json.dumps(items, indent=2))
        return
    for t in items:
        grants = ",".join(f"{g['role']}@{g['project'] or '*'}" for g in t["grants"])
        typer.echo(
            f"{t['id']}\t{t['name']}\t{t['kind']}\t{t['status']}\t{grants}\t{t['prefix']}...\t"
            f"expires {t['expires_at'] or 'never'}\tused {t['last_used_at'] or 'never'}"
        )


@tokens_app.command("revoke")
def tokens_revoke(token_id: str) -> None:
    """Revoke a token: it stops working at once, everywhere."""
    call(State.client().request, "DELETE", f"/v1/tokens/{token_id}")
    typer.echo(f"token {token_id} revoked")
