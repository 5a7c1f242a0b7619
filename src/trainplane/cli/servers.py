"""Verbs that run the server side here: ``server``, ``up``, ``scheduler`` and
``db upgrade``. Their implementations live in ``trainplane.serve``, imported
only when one of these runs."""

from __future__ import annotations

from typing import Annotated

import typer

from trainplane.cli.common import fail, say
from trainplane.cli.extras import require_server_extra

db_app = typer.Typer(no_args_is_help=True, help="Database schema.")

Host = Annotated[str, typer.Option(help="Interface to listen on.")]
Port = Annotated[int, typer.Option(help="Port to listen on.")]
LogLevel = Annotated[str, typer.Option(help="Log level.")]


def server(
    host: Host = "127.0.0.1",
    port: Port = 8080,
    workers: Annotated[int, typer.Option(min=1, help="API worker processes.")] = 1,
    scheduler: Annotated[
        bool, typer.Option(help="Also run the scheduler loops in this process.")
    ] = True,
    log_level: LogLevel = "info",
    insecure_no_auth: Annotated[
        bool,
        typer.Option(
            "--insecure-no-auth",
            help="Listen beyond 127.0.0.1 although the installation has no token yet "
            "(everyone who reaches it is an admin); warns every minute.",
        ),
    ] = False,
) -> None:
    """Run the API server and the scheduler (settings from TRAINPLANE_* variables).

    On an address other than loopback it starts only once the installation
    has a token (or TRAINPLANE_BOOTSTRAP_TOKEN sets one)."""
    require_server_extra("server")
    from trainplane.config import Settings
    from trainplane.observability.logs import configure_logging
    from trainplane.serve.processes import ServeError, run_server

    settings = Settings()
    configure_logging(log_level, settings.log_format)
    try:
        run_server(
            settings,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
            scheduler=scheduler,
            insecure_no_auth=insecure_no_auth,
        )
    except ServeError as exc:
        raise fail(str(exc)) from None


def up(
    host: Host = "127.0.0.1",
    port: Port = 8080,
    slots: Annotated[
        int | None, typer.Option(min=1, help="Worker slots of the local cluster (default: CPUs).")
    ] = None,
    log_level: LogLevel = "info",
    cpu: Annotated[
        bool,
        typer.Option(
            "--cpu", help="CPU workers even on a machine with NVIDIA GPUs (found through NVML)."
        ),
    ] = False,
) -> None:
    """Run everything on this machine: API, scheduler and a local Ray cluster
    with this machine's NVIDIA GPUs (CPU worker slots without any, or with --cpu)."""
    require_server_extra("up")
    from trainplane.config import Settings
    from trainplane.observability.logs import configure_logging
    from trainplane.serve.embedded import run_up
    from trainplane.serve.processes import ServeError

    settings = Settings()
    configure_logging(log_level, settings.log_format)
    try:
        run_up(settings, host=host, port=port, slots=slots, log_level=log_level, cpu_only=cpu)
    except ServeError as exc:
        raise fail(str(exc)) from None


def scheduler(log_level: LogLevel = "info") -> None:
    """Run the scheduler loops alone (several may run against one PostgreSQL)."""
    require_server_extra("scheduler")
    from trainplane.config import Settings
    from trainplane.observability.logs import configure_logging
    from trainplane.serve.processes import ServeError, run_scheduler

    settings = Settings()
    configure_logging(log_level, settings.log_format)
    try:
        run_scheduler(settings)
    except ServeError as exc:
        raise fail(str(exc)) from None


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Apply database migrations."""
    require_server_extra("db upgrade")
    from trainplane.config import Settings
    from trainplane.serve.database import upgrade

    say(f"database schema at {upgrade(Settings(), revision)}")
