"""Engines and sessions, built from Settings (never at import time)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from trainplane.config import Settings
from trainplane.private_files import private_database_file


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets readers run beside the single writer; busy_timeout makes a second
    # writer wait instead of failing at once; SQLite ignores foreign keys unless asked.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_engine(
    url: str,
    *,
    pool_size: int = 10,
    statement_timeout_ms: int | None = None,
    single_use: bool = False,
) -> Engine:
    """An engine for ``url``; ``single_use`` opens a fresh connection per checkout
    (migrations, one-shot commands) instead of keeping a pool."""
    parsed = make_url(url)
    pooling: dict[str, Any] = {"poolclass": NullPool} if single_use else {}
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            # The job store holds token hashes and specs: this user's only.
            private_database_file(Path(parsed.database))
        engine = create_engine(url, connect_args={"check_same_thread": False}, **pooling)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    connect_args: dict[str, Any] = {"connect_timeout": 5}
    if statement_timeout_ms:
        connect_args["options"] = f"-c statement_timeout={statement_timeout_ms}"
    if not single_use:
        # No pre-ping: it costs a round trip per checkout. After a database
        # restart the first statement on a dead connection fails (a 503 with
        # Retry-After), and SQLAlchemy then discards the whole stale pool.
        pooling = {"pool_size": pool_size, "max_overflow": pool_size, "pool_timeout": 10}
    return create_engine(url, connect_args=connect_args, **pooling)


def engine_from_settings(settings: Settings) -> Engine:
    return make_engine(
        settings.resolved_database_url,
        pool_size=settings.db_pool_size,
        statement_timeout_ms=settings.db_statement_timeout_ms,
    )


def session_factory(engine: Engine) -> sessionmaker[Session]:
    # expire_on_commit=False: services return ORM rows that the API serialises
    # after the commit, without a second round trip per attribute.
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def read_only(session: Session) -> Iterator[Session]:
    """A unit of work that only reads: its statements run in autocommit mode,
    which saves the BEGIN and COMMIT round trips. Each statement still sees a
    consistent snapshot; use a real transaction when reads must agree."""
    with session.begin():
        session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        yield session
