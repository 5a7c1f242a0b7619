"""Schema migrations from the command line."""

from __future__ import annotations

from trainplane.config import Settings
from trainplane.db import migrate
from trainplane.db.engine import make_engine


def upgrade(settings: Settings, revision: str = "head") -> str:
    """Migrate to ``revision``; returns the revision the database is at."""
    url = settings.resolved_database_url
    migrate.upgrade(url, revision)
    engine = make_engine(url, single_use=True)
    try:
        return ", ".join(migrate.current_revisions(engine)) or "base"
    finally:
        engine.dispose()
