"""``trainplane up``: the API, the scheduler and a local Ray head in one
command, on the embedded SQLite store unless a database URL is set."""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from trainplane.backends.local_gpus import detect_gpus, local_cluster_fields
from trainplane.backends.local_ray import LocalRayHead
from trainplane.config import Settings
from trainplane.db.engine import engine_from_settings, session_factory
from trainplane.serve.exposure import is_loopback
from trainplane.serve.processes import (
    prepare_database,
    require_safe_exposure,
    running_scheduler,
    serve_api,
)
from trainplane.services.clusters import upsert_cluster
from trainplane.services.tokens import bootstrap, ensure_local_token

log = logging.getLogger("trainplane")

LOCAL_CLUSTER = "local"
# Where `up` keeps the local admin token; the CLI reads the same path.
TOKEN_FILE = "token"


def ray_state_dir(home: Path) -> Path:
    """Ray's temp folder for this home: short, because Ray puts unix sockets
    there and socket paths are limited to about 100 characters."""
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"tp-{digest}"


def local_admin_token(session: Session, settings: Settings) -> str | None:
    """The token a single local user works with, unless the operator set a
    bootstrap token (then that one is theirs to use)."""
    if settings.bootstrap_token is not None:
        bootstrap(session, settings.bootstrap_token.get_secret_value())
        return None
    return ensure_local_token(session, settings.home / TOKEN_FILE)


def run_up(
    settings: Settings,
    *,
    host: str,
    port: int,
    slots: int | None,
    log_level: str,
    cpu_only: bool = False,
) -> None:
    """``cpu_only``: CPU workers even on a machine with GPUs."""
    slots = slots or settings.local_slots or os.cpu_count() or 1
    if settings.advertise_url is None:
        settings = settings.model_copy(update={"advertise_url": f"http://{host}:{port}"})
    prepare_database(settings)
    gpus = [] if cpu_only else detect_gpus()
    head = LocalRayHead(
        ray_state_dir(settings.home),
        slots=slots,
        gpus=len(gpus),
        log_path=settings.home / "ray-head.log",
    )
    settings.home.mkdir(parents=True, exist_ok=True)
    cluster = local_cluster_fields(LOCAL_CLUSTER, head.address, slots=slots, gpus=gpus)
    log.info(
        "starting a local Ray head with %s (log: %s)", _capacity(cluster, slots), head.log_path
    )
    head.start()
    try:
        engine = engine_from_settings(settings)
        with session_factory(engine)() as session:
            upsert_cluster(session, **cluster)
            secret = local_admin_token(session, settings)
        engine.dispose()
        log.info(
            "local Ray cluster at %s (dashboard), job logs under %s", head.address, head.temp_dir
        )
        if secret:
            # The secret itself never goes to the log: logs are read by others.
            shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
            log.info(
                "the CLI uses the local admin token kept in %s; to sign a browser in, open "
                "http://%s:%d/login (or the dashboard's Token button) and paste it there",
                settings.home / TOKEN_FILE,
                shown,
                port,
            )
        require_safe_exposure(settings, host, insecure_no_auth=False)
        signal.signal(signal.SIGTERM, _interrupt)
        # Only on loopback is whoever submits the local user, naming their own files.
        local_user = is_loopback(host)
        with running_scheduler(settings, local_user=local_user):
            serve_api(
                settings,
                host=host,
                port=port,
                workers=1,
                log_level=log_level,
                local_user=local_user,
            )
    except KeyboardInterrupt:
        pass  # stopped by Ctrl-C or SIGTERM: stop the head below, and end quietly
    finally:
        log.info("stopping the local Ray head")
        head.stop()


def _capacity(cluster: dict[str, Any], slots: int) -> str:
    if cluster["accelerator"] == "cpu":
        return f"{slots} CPU worker slots"
    return (
        f"{cluster['gpus']} {cluster['accelerator']} GPUs of {cluster['gpu_memory_gb']:g} GB "
        f"and {slots} CPUs"
    )


def _interrupt(signum: int, frame: object) -> None:
    # uvicorn stops on SIGTERM, then raises it again for the handler it found:
    # as an exception here, so the scheduler and the Ray head are stopped too
    # (the default action ends the process on the spot and leaves Ray's
    # agents running).
    raise KeyboardInterrupt
