"""Locks that serialise scheduler work (and migrations) across processes.

On PostgreSQL, a transaction-scoped advisory lock: whoever holds it places jobs;
others skip that pass. SQLite has no such lock, so trainplane runs one scheduler
per SQLite database, held by a file lock for the process's lifetime
(:class:`SchedulerFileLock`), and the in-process lock below orders its threads.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.orm import Session

# Arbitrary constants naming the placement and migration locks in pg_locks.
PLACEMENT_LOCK_KEY = 7_316_502_114
MIGRATION_LOCK_KEY = 7_316_502_115
_process_lock = threading.Lock()


def try_placement_lock(session: Session) -> bool:
    """Take the placement lock for the current transaction, if it is free."""
    if session.get_bind().dialect.name == "postgresql":
        return bool(
            session.scalar(
                text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": PLACEMENT_LOCK_KEY}
            )
        )
    return True  # SQLite: SchedulerFileLock and placement_section() already serialise


def placement_section() -> threading.Lock:
    """Held around a placement pass so threads of one process never overlap."""
    return _process_lock


class SchedulerFileLock:
    """An exclusive lock on a file beside the SQLite database."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
