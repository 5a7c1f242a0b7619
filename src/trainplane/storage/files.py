"""Writing a folder of files into a storage: stage locally, then publish each
file (a rename on the same local filesystem, an upload to S3), recording its
size and SHA-256 so a manifest written afterwards can vouch for them."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from trainplane.storage.backends import PARTIAL_SUFFIX, LocalStorage, Storage

STAGING = ".staging"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(4 * 1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def staging_folder(storage: Storage, prefix: str, label: str) -> Iterator[Path]:
    """An empty local folder to write files destined for ``prefix`` into,
    removed afterwards. On a local storage it sits beside their destination,
    so publishing is a rename."""
    if isinstance(storage, LocalStorage):
        base = storage.local_folder(prefix) / STAGING / label
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
    else:
        base = Path(tempfile.mkdtemp(prefix=f"trainplane-{label}-"))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def publish(storage: Storage, staging: Path, prefix: str) -> list[dict[str, Any]]:
    """Every file under ``staging`` to ``prefix/<relative path>``; returns
    their manifest entries (path relative to ``prefix``, size, sha256)."""
    entries = []
    for file in sorted(p for p in staging.rglob("*") if p.is_file()):
        relative = file.relative_to(staging).as_posix()
        entries.append({"path": relative, "size": file.stat().st_size, "sha256": sha256_of(file)})
        storage.put_file(file, f"{prefix}/{relative}" if prefix else relative)
    return entries


def missing_file(storage: Storage, prefix: str, entries: list[Any]) -> str | None:
    """The first of the manifest ``entries`` (with ``path`` and ``size``) that
    is not under ``prefix`` with its recorded size, described; None if all are."""
    present = storage.sizes(prefix)
    for entry in entries:
        if present.get(entry.path) != entry.size:
            return f"{entry.path} is missing or has the wrong size"
    return None


def publish_folder(
    storage: Storage, folder: Path, prefix: str, *, move: bool = False
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every regular file under ``folder`` (a job's own folder, not a staging
    area) to ``prefix/<relative path>``: (their manifest entries, the paths
    skipped). Symlinks and special files are skipped, never followed or
    opened, so nothing outside ``folder`` is published. The files are copied
    (on a local storage through a partial file renamed into place) unless
    ``move``, when a local storage may take them by a rename."""
    entries: list[dict[str, Any]] = []
    skipped: list[str] = []
    for top, _, _, top_fd in os.fwalk(folder, follow_symlinks=False):
        with os.scandir(top_fd) as found:
            # Folders are walked into by fwalk (never through a symlink).
            children = [entry for entry in found if not entry.is_dir(follow_symlinks=False)]
        for child in children:
            relative = (Path(top) / child.name).relative_to(folder).as_posix()
            entry = None
            if not (child.is_symlink() or child.name.endswith(PARTIAL_SUFFIX)):
                entry = _publish_file(
                    storage, Path(top) / child.name, top_fd, f"{prefix}/{relative}", move=move
                )
            if entry is None:
                skipped.append(relative)
            else:
                entries.append({"path": relative, **entry})
    return sorted(entries, key=lambda entry: entry["path"]), sorted(skipped)


def _publish_file(
    storage: Storage, file: Path, folder_fd: int, path: str, *, move: bool
) -> dict[str, Any] | None:
    """``file``, in the folder opened as ``folder_fd``, to ``path``: its size
    and sha256, or None when it is not a regular file (a FIFO, a device)."""
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
        fd = os.open(file.name, flags, dir_fd=folder_fd)
    except OSError:
        return None
    with open(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            return None
        if not isinstance(storage, LocalStorage):
            digest, size = _digest(source)
            storage.put_file(file, path)
            return {"size": size, "sha256": digest}
        target = storage.local_folder(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if move:
            with contextlib.suppress(OSError):
                digest, size = _digest(source)
                os.rename(file, target)
                return {"size": size, "sha256": digest}
            source.seek(0)
        partial = target.with_name(f"{target.name}{PARTIAL_SUFFIX}")
        digest, size = _digest(source, copy_to=partial)
        os.replace(partial, target)
        return {"size": size, "sha256": digest}


def _digest(source: BinaryIO, copy_to: Path | None = None) -> tuple[str, int]:
    """(sha256, size) of what ``source`` holds, written to ``copy_to`` on the way."""
    digest = hashlib.sha256()
    size = 0
    with open(copy_to, "wb") if copy_to else contextlib.nullcontext() as copy:
        while chunk := source.read(4 * 1024 * 1024):
            digest.update(chunk)
            size += len(chunk)
            if copy is not None:
                copy.write(chunk)
    return digest.hexdigest(), size
