"""``tokens create|list|revoke``: API tokens and their roles, over the API;
``tokens create NAME --admin`` in the database itself, on the server's machine."""

from __future__ import annotations

from typing import Annotated

import typer

from trainplane.cli.common import EXIT_USAGE, State, call, fail, say
from trainplane.cli.extras import require_server_extra
from trainplane.cli.output import JsonFlag, OutputChoice, OutputOption, emit
from trainplane.jobs.durations import parse_duration

tokens_app = typer.Typer(no_args_is_help=True, help="API tokens for people and CI pipelines.")


@tokens_app.command("create")
def tokens_create(
    name: Annotated[str, typer.Argument(help="Names the caller in job and audit events.")],
    project: Annotated[
        str | None,
        typer.Option("--project", "-p", help="The project of the role; omit for every project."),
    ] = None,
    role: Annotated[str, typer.Option(help="viewer, member or admin.")] = "member",
    service: Annotated[
        bool, typer.Option("--service", help="For a CI pipeline or another program.")
    ] = False,
    expires_in: Annotated[
        str | None, typer.Option(help="30d, 12h, ...; default: never expires.")
    ] = None,
    output: OutputOption = None,
    as_json: JsonFlag = False,
    admin: Annotated[
        bool,
        typer.Option(
            "--admin",
            help="An installation-wide admin token, made on the server's machine straight "
            "in its database (TRAINPLANE_DATABASE_URL or TRAINPLANE_HOME): no server or "
            "token needed. The first token, or the way back in after losing every admin token.",
        ),
    ] = False,
) -> None:
    """Create a token; prints its secret, which is shown only this once."""
    if admin:
        if project is not None or role != "member" or service:
            raise fail(
                "--admin makes an installation-wide admin token: "
                "drop --project, --role and --service",
                EXIT_USAGE,
            )
        _create_admin_in_database(name, expires_in, OutputChoice.of(output, as_json))
        return
    body = {
        "name": name,
        "project": project,
        "role": role,
        "kind": "service" if service else "user",
        "expires_in": expires_in,
    }
    created = call(State.client().post, "/v1/tokens", body)
    fmt = OutputChoice.of(output, as_json)
    if fmt != "table":
        emit(created, fmt)
        return
    say(f"token {created['id']} ({role} in {project or 'every project'}); keep the secret now:")
    typer.echo(created["token"])


def _create_admin_in_database(name: str, expires_in: str | None, fmt: str) -> None:
    # Server code, imported only here: this branch runs on the server's machine.
    require_server_extra("tokens create --admin")
    from trainplane.config import Settings
    from trainplane.serve.admin_tokens import create_admin_token
    from trainplane.serve.processes import ServeError

    try:
        seconds = parse_duration(expires_in) if expires_in else None
    except ValueError as exc:
        raise fail(f"--expires-in: {exc}", EXIT_USAGE) from None
    try:
        new = create_admin_token(Settings(), name=name, expires_in_seconds=seconds)
    except ServeError as exc:
        raise fail(str(exc)) from None
    token = new.view.token
    if fmt != "table":
        expires_at = token.expires_at.isoformat() if token.expires_at else None
        record = {"id": token.id, "name": token.name, "token": new.secret, "expires_at": expires_at}
        emit(record, fmt)
        return
    say(f"token {token.id} (admin in every project), made in the database; keep the secret now:")
    typer.echo(new.secret)


@tokens_app.command("list")
def tokens_list(output: OutputOption = None, as_json: JsonFlag = False) -> None:
    """The tokens of the projects you administer (never their secrets)."""
    items = call(State.client().get, "/v1/tokens")["items"]
    fmt = OutputChoice.of(output, as_json)
    if fmt != "table":
        emit(items, fmt)
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
    call(State.client().json, "DELETE", f"/v1/tokens/{token_id}")
    typer.echo(f"token {token_id} revoked")
