"""Alembic environment: runs migrations against the configured database.

The URL comes from the Alembic config when ``trainplane db upgrade`` or a test
sets it, otherwise from Settings (``TRAINPLANE_DATABASE_URL`` or the embedded
SQLite file).
"""

from __future__ import annotations

import logging.config

from alembic import context
from sqlalchemy import text

from trainplane.config import Settings
from trainplane.db import models  # noqa: F401  (registers every table on the metadata)
from trainplane.db.base import Base, UTCDateTime
from trainplane.db.engine import make_engine
from trainplane.db.locks import MIGRATION_LOCK_KEY

config = context.config
if config.config_file_name is not None:
    logging.config.fileConfig(config.config_file_name, disable_existing_loggers=False)

url = config.get_main_option("sqlalchemy.url") or Settings().resolved_database_url


def render_item(type_: str, obj: object, autogen_context: object) -> str | bool:
    # Migrations must not import application types: write UTCDateTime as the
    # plain column type it stores.
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def run_migrations() -> None:
    engine = make_engine(url, single_use=True)
    with engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            # Several replicas or a rollout's Job may upgrade at once: one
            # migrates while the others wait, then find nothing left to do.
            # The lock is the session's, so it outlives this commit and goes
            # with the connection.
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            connection.commit()
        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            # SQLite cannot ALTER most things in place; batch mode recreates tables.
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
            render_item=render_item,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
run_migrations()
