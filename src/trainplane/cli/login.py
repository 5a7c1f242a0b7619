"""``trainplane login URL``: check that the server answers (and takes the
token), then save both in the client's config file (``sdk.config_file``),
which the CLI and the SDK read when no flag or environment variable says
otherwise."""

from __future__ import annotations

from typing import Annotated

import typer

from trainplane.cli.common import EXIT_USAGE, State, call, fail, say
from trainplane.sdk.config_file import ClientConfig, config_path, url_problem, write_config
from trainplane.sdk.credentials import token_for
from trainplane.sdk.sessions import Session


def login(
    url: Annotated[str, typer.Argument(help="The server's address, http(s)://host:port.")],
    check: Annotated[
        bool,
        typer.Option(
            "--check/--no-check", help="Ask the server first, and save nothing if it refuses."
        ),
    ] = True,
) -> None:
    """Save a server's URL and token (the global --token, or TRAINPLANE_TOKEN)
    as the CLI's and the SDK's default, in $TRAINPLANE_CONFIG, else
    ~/.config/trainplane/config.yaml (mode 0600). Flags and TRAINPLANE_URL /
    TRAINPLANE_TOKEN still win over it; its token is only ever sent to its URL."""
    url = url.rstrip("/")
    problem = url_problem(url, "the command line")
    if problem is not None:
        raise fail(problem, EXIT_USAGE)
    # The global --token as given (State.token may be a local one, not to be saved).
    token = State.given_token
    if check:
        client = Session(url, token_for(url, token), agent="trainplane-cli")
        try:
            projects = call(client.get, "/v1/projects")["items"]
        finally:
            client.close()
        say(f"{url} answers; you see {len(projects)} project(s)")
    path = write_config(ClientConfig(url, token), config_path())
    say(f"saved {url}{' and its token' if token else ''} to {path}")
