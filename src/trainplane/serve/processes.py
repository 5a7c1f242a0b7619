"""Running the API server and the scheduler as processes."""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from trainplane.config import Settings
from trainplane.db import migrate
from trainplane.db.engine import engine_from_settings, session_factory
from trainplane.db.locks import SchedulerFileLock
from trainplane.observability.logs import logging_config
from trainplane.private_files import private_home
from trainplane.scheduler.loop import Scheduler
from trainplane.scheduler.tracking import TrackingLoop
from trainplane.serve.exposure import refusal_to_listen, warning_while_open

log = logging.getLogger("trainplane")


class ServeError(RuntimeError):
    """Cannot start as asked; the message says why."""


def prepare_home(settings: Settings) -> None:
    """TRAINPLANE_HOME, 0700: the job store, the local token and caches live there."""
    private_home(settings.home)


def prepare_database(settings: Settings) -> None:
    prepare_home(settings)
    if settings.should_auto_migrate:
        applied = migrate.upgrade_counting(settings.resolved_database_url)
        if applied:
            log.info(
                "database schema upgraded to %s (%d migration%s)",
                ", ".join(migrate.head_revisions(settings.resolved_database_url)),
                applied,
                "" if applied == 1 else "s",
            )


def require_safe_exposure(settings: Settings, host: str, *, insecure_no_auth: bool) -> None:
    """Refuse to serve an installation without tokens beyond this machine."""
    refusal = refusal_to_listen(settings, host, insecure_no_auth=insecure_no_auth)
    if refusal is not None:
        raise ServeError(refusal)


@contextmanager
def running_scheduler(settings: Settings, *, local_user: bool = False) -> Iterator[Scheduler]:
    """A scheduler loop and the MLflow tracking loop in background threads,
    stopped on exit. On SQLite only one scheduler may run per database; a file
    lock enforces it. ``local_user``: see :func:`serve_api`."""
    lock = None
    if settings.is_sqlite:
        database = Path(settings.resolved_database_url.removeprefix("sqlite:///"))
        lock = SchedulerFileLock(database.with_name(database.name + ".scheduler.lock"))
        if not lock.acquire():
            raise ServeError(
                f"another scheduler already runs against {database}; with SQLite run one "
                "scheduler (or use PostgreSQL for several)"
            )
    engine = engine_from_settings(settings)
    sessions = session_factory(engine)
    scheduler = Scheduler(settings, sessions, local_user=local_user)
    tracking = TrackingLoop(settings, sessions) if settings.tracking_enabled else None
    scheduler.start()
    if tracking is not None:
        log.info("tracking jobs in MLflow at %s", settings.resolved_tracking_uri)
        tracking.start()
    try:
        yield scheduler
    finally:
        scheduler.stop()
        if tracking is not None:
            tracking.stop()
        engine.dispose()
        if lock is not None:
            lock.release()


def serve_api(
    settings: Settings,
    *,
    host: str,
    port: int,
    workers: int,
    log_level: str,
    local_user: bool = False,
) -> None:
    """``local_user``: ``trainplane up`` on loopback, whose one local user's
    specs may name their own files (services.file_access)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    log.info("dashboard and API at http://%s:%d/", shown, port)
    uvicorn.run(
        "trainplane.api.app:create_local_user_app"
        if local_user
        else "trainplane.api.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        log_config=logging_config(log_level, settings.log_format),
        access_log=False,
    )


def run_server(
    settings: Settings,
    *,
    host: str,
    port: int,
    workers: int,
    log_level: str,
    scheduler: bool,
    insecure_no_auth: bool = False,
) -> None:
    prepare_database(settings)
    require_safe_exposure(settings, host, insecure_no_auth=insecure_no_auth)
    settings = with_advertise_url(settings, host, port)
    with warning_while_open(settings, host):
        if not scheduler:
            serve_api(settings, host=host, port=port, workers=workers, log_level=log_level)
            return
        with running_scheduler(settings):
            serve_api(settings, host=host, port=port, workers=workers, log_level=log_level)


def with_advertise_url(settings: Settings, host: str, port: int) -> Settings:
    """Where attempts report progress: this server, unless told otherwise. A
    wildcard bind address is not reachable as such; the host's name is."""
    if settings.advertise_url is not None:
        return settings
    reachable = socket.getfqdn() if host in ("0.0.0.0", "::", "") else host
    if ":" in reachable:
        reachable = f"[{reachable}]"
    return settings.model_copy(update={"advertise_url": f"http://{reachable}:{port}"})


def run_scheduler(settings: Settings) -> None:
    prepare_database(settings)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with running_scheduler(settings):
        log.info("scheduler running; stop with Ctrl-C")
        stop.wait()
