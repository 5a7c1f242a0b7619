"""Writing a folder of files into a storage: stage locally, then publish each
file (a rename on the same local filesystem, an upload to S3), recording its
size and SHA-256 so a manifest written afterwards can vouch for them."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainplane.storage.backends import LocalStorage, Storage

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
