"""Code bundles as folders the Ray Jobs API can ship: a job with
``entrypoint.code`` runs in its bundle, unpacked here once per digest.

The folders are a cache: Ray keeps its own copy of a job's working_dir once
the job is submitted, so a folder no launch used for BUNDLE_CACHE_IDLE goes,
and is unpacked again from the database should a restart need it."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from trainplane.code_bundles import BundleError, bundle_folder, unpack_bundle
from trainplane.scheduler.launch import LaunchError
from trainplane.services.bundles import bundle_content

BUNDLE_CACHE_IDLE = timedelta(hours=1)


class BundleFolders:
    def __init__(self, sessions: sessionmaker[Session], cache_dir: Path | None = None) -> None:
        self.sessions = sessions
        # Unpacked bundles are a cache, rebuilt from the database at will.
        self.cache_dir = cache_dir or Path(tempfile.gettempdir()) / "trainplane-bundles"
        # A launch's touch and prune()'s look-then-remove never interleave.
        self._lock = threading.Lock()

    def folder(self, project: str, digest: str) -> str:
        cached = bundle_folder(self.cache_dir, digest)
        with self._lock:
            if cached.is_dir():
                os.utime(cached)  # used: kept from prune() a while longer
                return str(cached)
        with self.sessions() as session:
            data = bundle_content(session, project, digest)
        if data is None:
            raise LaunchError(f"entrypoint.code: project '{project}' no longer has bundle {digest}")
        try:
            return str(unpack_bundle(data, self.cache_dir))
        except (BundleError, OSError) as exc:
            raise LaunchError(
                f"entrypoint.code: bundle {digest} cannot be unpacked: {exc}"
            ) from exc

    def prune(self, idle_for: timedelta) -> int:
        """Removes the unpacked bundles no launch used for ``idle_for``, and
        unpacking leftovers as old; returns how many went."""
        cutoff = time.time() - idle_for.total_seconds()
        removed = 0
        if not self.cache_dir.is_dir():
            return 0
        for entry in self.cache_dir.iterdir():
            doomed = entry.with_name(f".removing-{entry.name}")
            with self._lock:
                try:
                    if not (entry.is_dir() and entry.stat().st_mtime < cutoff):
                        continue
                    # Renamed first, so a launch never sees a half-removed folder.
                    entry.rename(doomed)
                except OSError:
                    continue
            shutil.rmtree(doomed, ignore_errors=True)
            removed += 1
        return removed
