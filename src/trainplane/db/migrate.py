"""Alembic, driven from code: ``trainplane db upgrade`` and the server's start-up check."""

from __future__ import annotations

import importlib
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from trainplane.db.engine import make_engine


def migrations_dir() -> Path:
    # The top-level migrations/ folder is installed as the trainplane.migrations
    # package, so this works from a checkout and from a wheel alike.
    module = importlib.import_module("trainplane.migrations")
    return Path(module.__file__).parent  # type: ignore[arg-type]


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # Alembic's ini interpolation treats % specially.
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def upgrade_counting(database_url: str) -> int:
    """Migrate to head; returns how many migrations that applied."""
    config = alembic_config(database_url)
    script = ScriptDirectory.from_config(config)
    engine = make_engine(database_url, single_use=True)
    try:
        before = current_revisions(engine)
    finally:
        engine.dispose()
    pending = len(list(script.iterate_revisions("heads", before or "base")))
    command.upgrade(config, "head")
    return pending


def head_revisions(database_url: str) -> tuple[str, ...]:
    return tuple(ScriptDirectory.from_config(alembic_config(database_url)).get_heads())


def current_revisions(engine: Engine) -> tuple[str, ...]:
    with engine.connect() as connection:
        return tuple(MigrationContext.configure(connection).get_current_heads())
