"""The real ``trainplane server`` the fuzz tests call: its own PostgreSQL
database, the bootstrap admin token, and no scheduler, so that nothing is
ever placed on a cluster."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainplane.db import migrate
from trainplane.testing.server import ServerProcess

BOOTSTRAP_TOKEN = "fuzz-bootstrap-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {BOOTSTRAP_TOKEN}"}


@contextlib.contextmanager
def serve(postgres_server: Any, home: Path) -> Iterator[str]:
    """The server's URL while it runs; ``postgres_server`` is the suite's."""
    with serve_database(postgres_server.create_database("tp_fuzz"), home) as url:
        yield url


@contextlib.contextmanager
def serve_database(database_url: str, home: Path) -> Iterator[str]:
    """The server's URL while it runs on ``database_url``, migrated here."""
    migrate.upgrade(database_url)
    env = {
        "TRAINPLANE_DATABASE_URL": database_url,
        "TRAINPLANE_HOME": str(home),
        "TRAINPLANE_BOOTSTRAP_TOKEN": BOOTSTRAP_TOKEN,
        "TRAINPLANE_AUTO_MIGRATE": "false",
    }
    with ServerProcess(env, args=("--no-scheduler",), log_path=home / "server.log") as server:
        yield server.url
