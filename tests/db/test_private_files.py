"""TRAINPLANE_HOME is created 0700 and the SQLite job store 0600 (with its
journal files), so other users of the machine read neither; an existing
database is tightened, an existing loose home is reported."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from sqlalchemy import text

from trainplane.config import Settings
from trainplane.db.engine import make_engine
from trainplane.serve.processes import prepare_database


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_home_and_database_are_private_even_with_a_loose_umask(tmp_path):
    previous = os.umask(0o022)  # what most accounts have: new files 0644, folders 0755
    try:
        settings = Settings(home=tmp_path / "home", auto_migrate=True)
        prepare_database(settings)
        engine = make_engine(settings.resolved_database_url)
        with engine.begin() as connection:  # a write: SQLite makes its -wal and -shm files
            connection.execute(text("CREATE TABLE IF NOT EXISTS probe (x INTEGER)"))
            connection.execute(text("INSERT INTO probe VALUES (1)"))
        database = settings.home / "trainplane.db"
        # Open, the engine keeps SQLite's -wal and -shm files (the last close removes them).
        companions = {
            p.name: mode(p) for p in settings.home.iterdir() if p.name.startswith("trainplane.db-")
        }
        engine.dispose()
    finally:
        os.umask(previous)
    assert mode(settings.home) == 0o700
    assert mode(database) == 0o600
    assert companions and set(companions.values()) == {0o600}, companions


def test_an_existing_readable_database_is_made_private(tmp_path):
    database = tmp_path / "old.db"
    make_engine(f"sqlite:///{database}").dispose()
    for path in (database, tmp_path / "old.db-wal"):
        path.touch()
        path.chmod(0o644)
    make_engine(f"sqlite:///{database}").dispose()
    assert mode(database) == 0o600 and mode(tmp_path / "old.db-wal") == 0o600


def test_an_existing_loose_home_is_reported_not_changed(tmp_path, caplog):
    home = tmp_path / "shared-home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    caplog.set_level(logging.WARNING)
    prepare_database(Settings(home=home, auto_migrate=True))
    assert mode(home) == 0o755  # the operator's choice stands
    assert any(
        "chmod 700" in r.getMessage() and str(home) in r.getMessage() for r in caplog.records
    )
    assert mode(home / "trainplane.db") == 0o600
