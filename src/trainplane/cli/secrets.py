"""``secrets set|list|delete``: a project's secrets, which its jobs receive
as environment variables (``entrypoint.secrets: {ENV_VAR: key}``).

A value is never an argument (it would land in shell history and in every
process listing): ``set`` reads it from a file, from standard input, or from
a prompt that does not echo. No command ever prints one.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from trainplane.cli.common import EXIT_USAGE, State, call, fail, say
from trainplane.cli.output import JsonFlag, OutputChoice, OutputOption, emit

secrets_app = typer.Typer(
    no_args_is_help=True,
    help="A project's secrets: values its jobs get as environment variables, shown nowhere.",
)

Project = Annotated[str, typer.Argument(help="The project the secret belongs to.")]
Key = Annotated[str, typer.Argument(help="The secret's key, as entrypoint.secrets names it.")]


def _value(from_file: Path | None) -> str:
    """The value: a file's content as it is, else standard input (one
    trailing newline dropped, as `echo` adds one), else a hidden prompt."""
    if from_file is not None:
        try:
            return from_file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(f"cannot read {from_file}: {exc}", EXIT_USAGE) from None
    if not sys.stdin.isatty():
        text = sys.stdin.read()
        return text[:-1] if text.endswith("\n") else text
    return typer.prompt("Value", hide_input=True, confirmation_prompt=True)


@secrets_app.command("set")
def secrets_set(
    project: Project,
    key: Key,
    from_file: Annotated[
        Path | None, typer.Option("--from-file", help="Read the value from this file, as is.")
    ] = None,
    output: OutputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Create or replace a secret (project admins). The value comes from
    --from-file, standard input, or a prompt; it is never shown again."""
    value = _value(from_file)
    record = call(
        State.client().json,
        "PUT",
        f"/v1/projects/{project}/secrets/{key}",
        json={"value": value},
    )
    fmt = OutputChoice.of(output, as_json)
    if fmt != "table":
        emit(record, fmt)
        return
    say(f"secret {key} of project {project} set; jobs use it as entrypoint.secrets: {{VAR: {key}}}")


@secrets_app.command("list")
def secrets_list(
    project: Project,
    output: OutputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """The project's secret keys and who set each when (members); no values."""
    items = call(State.client().get, f"/v1/projects/{project}/secrets")["items"]
    fmt = OutputChoice.of(output, as_json)
    if fmt != "table":
        emit(items, fmt)
        return
    for s in items:
        typer.echo(f"{s['key']}\tupdated {s['updated_at']} by {s['updated_by']}")
    if not items:
        say(f"project {project} has no secrets")


@secrets_app.command("delete")
def secrets_delete(project: Project, key: Key) -> None:
    """Delete a secret (project admins). Queued jobs that name it fail at
    launch, saying which secret is missing."""
    call(State.client().json, "DELETE", f"/v1/projects/{project}/secrets/{key}")
    say(f"secret {key} of project {project} deleted")
