"""Code bundles as folders the Ray Jobs API can ship: a job with
``entrypoint.code`` runs in its bundle, unpacked here once per digest.

The folders are a cache: Ray keeps its own copy of a job's working_dir once
the job is submitted, so a folder no launch used for BUNDLE_CACHE_IDLE goes,
and is unpacked again from the database should a restart need it.

The cache is private to the installation (``<home>/cache/bundles``, 0700),
and a cached folder is used only while its files still hash to what was
unpacked (a ``<digest>.tree`` file beside it): a folder that was changed,
half removed or planted is unpacked afresh from the database instead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from trainplane.code_bundles import BundleError, bundle_folder, unpack_bundle
from trainplane.config import Settings
from trainplane.private_files import PRIVATE_FOLDER, is_private, private_folder
from trainplane.scheduler.launch import LaunchError
from trainplane.services.bundles import bundle_content

BUNDLE_CACHE_IDLE = timedelta(hours=1)
TREE_SUFFIX = ".tree"
_CHUNK = 1 << 20


def bundle_cache_dir(settings: Settings) -> Path:
    return settings.home / "cache" / "bundles"


def tree_digest(root: Path) -> str | None:
    """A digest of the folder's files: their paths, execute bits and bytes.
    None when it holds anything but plain files and folders (a symlink
    could point anywhere on this machine)."""
    found: list[tuple[str, Path | None, bool]] = []
    for folder, subfolders, names in os.walk(root):
        for name in subfolders + names:
            path = Path(folder, name)
            mode = path.lstat().st_mode
            relative = path.relative_to(root).as_posix()
            if stat.S_ISDIR(mode):
                found.append((relative + "/", None, False))
            elif stat.S_ISREG(mode):
                found.append((relative, path, bool(mode & 0o111)))
            else:
                return None
    digest = hashlib.sha256()
    for relative, path, executable in sorted(found):
        digest.update(f"{relative}\0{'x' if executable else '-'}\0".encode())
        if path is not None:
            content = hashlib.sha256()
            with open(path, "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    content.update(chunk)
            digest.update(content.digest())
    return digest.hexdigest()


def _tree_file(folder: Path) -> Path:
    return folder.with_name(folder.name + TREE_SUFFIX)


def is_intact(folder: Path) -> bool:
    """Whether ``folder`` still holds exactly the files it was unpacked with."""
    try:
        expected = _tree_file(folder).read_text().strip()
    except OSError:
        return False
    return folder.is_dir() and not folder.is_symlink() and tree_digest(folder) == expected


class BundleFolders:
    def __init__(self, sessions: sessionmaker[Session], cache_dir: Path) -> None:
        self.sessions = sessions
        # Unpacked bundles are a cache, rebuilt from the database at will.
        self.cache_dir = cache_dir
        # A launch's touch and prune()'s look-then-remove never interleave.
        self._lock = threading.Lock()

    def folder(self, project: str, digest: str) -> str:
        cached = bundle_folder(self.cache_dir, digest)
        if is_intact(cached):
            with self._lock:
                if cached.is_dir():  # not pruned meanwhile
                    os.utime(cached)  # used: kept from prune() a while longer
                    return str(cached)
        with self.sessions() as session:
            data = bundle_content(session, project, digest)
        if data is None:
            raise LaunchError(f"entrypoint.code: project '{project}' no longer has bundle {digest}")
        try:
            return str(self._unpack(data, cached))
        except (BundleError, OSError) as exc:
            raise LaunchError(
                f"entrypoint.code: bundle {digest} cannot be unpacked: {exc}"
            ) from exc

    def _private_cache(self) -> None:
        private_folder(self.cache_dir)
        if not is_private(self.cache_dir):  # an older or planted folder: ours, made private
            os.chmod(self.cache_dir, PRIVATE_FOLDER)

    def _unpack(self, data: bytes, cached: Path) -> Path:
        """Unpacks into a fresh folder, then swaps it in for whatever is at
        ``cached`` (nothing, or a folder that is no longer intact)."""
        self._private_cache()
        staging = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=self.cache_dir))
        try:
            fresh = unpack_bundle(data, staging)
            if fresh.name != cached.name:
                raise BundleError(f"the stored bytes are bundle {fresh.name}, not {cached.name}")
            _tree_file(fresh).write_text(tree_digest(fresh) or "")
            with self._lock:
                if is_intact(cached):  # another launch unpacked it meanwhile
                    os.utime(cached)
                    return cached
                if cached.exists() or cached.is_symlink():
                    cached.rename(staging / "replaced")  # removed with the staging folder
                os.replace(_tree_file(fresh), _tree_file(cached))
                fresh.rename(cached)
            return cached
        finally:
            shutil.rmtree(staging, ignore_errors=True)

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
                    _tree_file(entry).unlink(missing_ok=True)
                except OSError:
                    continue
            shutil.rmtree(doomed, ignore_errors=True)
            removed += 1
        return removed
