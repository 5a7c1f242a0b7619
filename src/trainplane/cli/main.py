"""``trainplane``: the command line. See ``trainplane.cli.common`` for exit codes.

The global options (``--url``, ``--token``) may come anywhere on the line,
before or after the verb; ``--output``/``-o`` before the verb sets the format
of every verb that prints (a verb's own ``-o`` wins)."""

from __future__ import annotations

import os
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

from trainplane.cli import init_spec, jobs, login, plan, servers, submit
from trainplane.cli.clusters import clusters_app, projects_app
from trainplane.cli.common import EXIT_USAGE, State, fail
from trainplane.cli.help_text import add_examples, plain_type_column
from trainplane.cli.output import OutputChoice, OutputOption
from trainplane.cli.registered_models import models_app
from trainplane.cli.secrets import secrets_app
from trainplane.cli.tokens import tokens_app
from trainplane.sdk.config_file import ConfigFileError, resolve_connection, url_problem
from trainplane.sdk.transport import DEFAULT_URL

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Multi-GPU training jobs on Ray. The server's address and token come from --url and "
    "--token (anywhere on the line), else TRAINPLANE_URL and TRAINPLANE_TOKEN, else the "
    "config file `trainplane login` writes ($TRAINPLANE_CONFIG, else "
    "~/.config/trainplane/config.yaml), else http://127.0.0.1:8080.",
)
app.command()(servers.up)
app.command()(servers.server)
app.command()(servers.scheduler)
app.command()(login.login)
app.command("init")(init_spec.init)
app.command(help=submit.HELP)(submit.submit)
app.command()(plan.plan)
app.add_typer(servers.db_app, name="db")
app.add_typer(jobs.jobs_app, name="jobs")
app.add_typer(clusters_app, name="clusters")
app.add_typer(projects_app, name="projects")
app.add_typer(models_app, name="models")
app.add_typer(tokens_app, name="tokens")
app.add_typer(secrets_app, name="secrets")

# Options of the whole command, accepted after the verb too (moved in front).
GLOBAL_OPTIONS = ("--url", "--token")


def _version() -> str:
    try:
        return version("trainplane")
    except PackageNotFoundError:  # a checkout on sys.path, not installed
        from trainplane import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"trainplane {_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    # No envvar=: the environment and the config file are read in one place
    # (sdk.config_file), which also says where a wrong address came from.
    url: Annotated[
        str | None,
        typer.Option(
            show_default=False, help="The server's address [default: TRAINPLANE_URL, ...]."
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(show_default=False, help="API token [default: TRAINPLANE_TOKEN, ...]."),
    ] = None,
    output: OutputOption = None,
    _version_flag: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version."
        ),
    ] = False,
) -> None:
    try:
        base, chosen, source = resolve_connection(url, token, DEFAULT_URL)
    except ConfigFileError as exc:
        raise fail(str(exc), EXIT_USAGE) from None
    problem = url_problem(base, source)
    if problem is not None:
        raise fail(problem, EXIT_USAGE)
    given = token or os.environ.get("TRAINPLANE_TOKEN")
    State.url, State.token, State.given_token = base, chosen, given
    OutputChoice.default = output


def hoisted(args: list[str]) -> list[str]:
    """``args`` with the global options (and their values) moved to the front,
    so that ``trainplane jobs list --url X`` means ``trainplane --url X jobs list``."""
    front: list[str] = []
    rest: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            rest += args[index:]
            break
        if arg in GLOBAL_OPTIONS and index + 1 < len(args):
            front += args[index : index + 2]
            index += 2
            continue
        if arg.startswith(tuple(f"{name}=" for name in GLOBAL_OPTIONS)):
            front.append(arg)
        else:
            rest.append(arg)
        index += 1
    return front + rest


add_examples(app)
plain_type_column()


def main() -> None:
    app(args=hoisted(sys.argv[1:]), prog_name="trainplane")


if __name__ == "__main__":
    sys.exit(main())
