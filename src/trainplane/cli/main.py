"""``trainplane``: the command line. See ``trainplane.cli.common`` for exit codes."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from trainplane.cli import jobs, plan, servers, submit
from trainplane.cli.clusters import clusters_app, projects_app
from trainplane.cli.common import State
from trainplane.cli.registered_models import models_app
from trainplane.cli.secrets import secrets_app
from trainplane.cli.tokens import tokens_app
from trainplane.sdk.credentials import token_for
from trainplane.sdk.transport import DEFAULT_URL

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Multi-GPU training jobs on Ray."
)
app.command()(servers.up)
app.command()(servers.server)
app.command()(servers.scheduler)
app.command(help=submit.HELP)(submit.submit)
app.command()(plan.plan)
app.add_typer(servers.db_app, name="db")
app.add_typer(jobs.jobs_app, name="jobs")
app.add_typer(clusters_app, name="clusters")
app.add_typer(projects_app, name="projects")
app.add_typer(models_app, name="models")
app.add_typer(tokens_app, name="tokens")
app.add_typer(secrets_app, name="secrets")


@app.callback()
def _root(
    url: Annotated[str, typer.Option(envvar="TRAINPLANE_URL", help="API address.")] = DEFAULT_URL,
    token: Annotated[str | None, typer.Option(envvar="TRAINPLANE_TOKEN", help="API token.")] = None,
) -> None:
    State.url, State.token = url, token_for(url, token)


def main() -> None:
    app(prog_name="trainplane")


if __name__ == "__main__":
    sys.exit(main())
