"""Folders and files of the control plane that only its own user may read:
``TRAINPLANE_HOME`` (the job store, the local admin token, caches) is created
0700, and the SQLite database with its journal files is kept 0600.

Other users of a shared machine, members of projects among them, must not
read the job store (token hashes, specs, attempt keys) or plant files where
the server would trust them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_FOLDER = 0o700
PRIVATE_FILE = 0o600
# SQLite's companions of a database file; it creates them with the file's mode.
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def is_private(path: Path) -> bool:
    return not stat.S_IMODE(path.stat().st_mode) & 0o077


def private_folder(path: Path) -> Path:
    """``path``, created 0700 when missing (missing parents as the umask
    says). A folder that exists keeps its mode: an operator may have chosen it."""
    path.mkdir(mode=PRIVATE_FOLDER, parents=True, exist_ok=True)
    return path


def private_home(path: Path) -> Path:
    """TRAINPLANE_HOME, created 0700; one that others can read is reported,
    with the fix."""
    private_folder(path)
    if not is_private(path):
        log.warning(
            "%s can be read by other users (mode %o); `chmod 700 %s` keeps them out",
            path,
            stat.S_IMODE(path.stat().st_mode),
            path,
        )
    return path


def private_database_file(path: Path) -> Path:
    """A SQLite database file at ``path``, 0600, in a 0700 folder when the
    folder is new. The file is created here (empty, which SQLite takes as a
    new database) so that it is never readable by others, even for a moment;
    one that exists is ours and is made 0600, with its journal files."""
    private_folder(path.parent)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE))
    for candidate in (path, *(path.with_name(path.name + s) for s in SQLITE_COMPANIONS)):
        try:
            if candidate.is_file() and not is_private(candidate):
                os.chmod(candidate, PRIVATE_FILE)
        except OSError as exc:  # not ours to change: say so, carry on
            log.warning("cannot make %s private: %s", candidate, exc)
    return path
