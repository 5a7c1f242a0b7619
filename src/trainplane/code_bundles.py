"""Code bundles: a job's code as one zip, uploaded once and named by its digest.

A bundle replaces a working_dir for clients that share no filesystem with the
server (the SDK, a CI runner): the client zips the files, uploads them
(``POST /v1/projects/{project}/bundles``) and names the digest in
``entrypoint.code``; the scheduler unpacks the bundle into a folder and ships
that folder as the Ray job's working_dir.

Pure functions over bytes and folders, shared by the client that builds a
bundle and the server that checks and unpacks one.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
_DIGEST = re.compile(DIGEST_PATTERN)
MAX_BUNDLE_BYTES = 64 << 20
MAX_FILES = 10_000
# Unpacked, a bundle may not grow past this: a zip bomb stops here.
MAX_UNPACKED_BYTES = 512 << 20
# A fixed timestamp: the same files always make the same zip, so the same digest.
_EPOCH = (1980, 1, 1, 0, 0, 0)
# Never part of a job's code: version control, environments and caches.
SKIPPED_NAMES = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        ".tox",
        "node_modules",
        "__pycache__",
        ".ipynb_checkpoints",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
    }
)


class BundleError(ValueError):
    """The bytes are not a bundle trainplane accepts; the message says why."""


@dataclass(frozen=True)
class BundleSummary:
    digest: str
    size_bytes: int
    files: int


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def is_digest(value: str) -> bool:
    return bool(_DIGEST.fullmatch(value))


def build_bundle(files: Iterable[tuple[str, bytes]], *, executable: Collection[str] = ()) -> bytes:
    """A zip of ``(path inside the bundle, content)`` pairs, byte for byte the
    same for the same files in any order; the ``executable`` ones unpack with
    their execute bits (a ``./run.sh`` command), the others as 0644."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in sorted(files):
            info = zipfile.ZipInfo(safe_member_name(name), date_time=_EPOCH)
            mode = 0o755 if name in executable else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, content)
    return buffer.getvalue()


@dataclass(frozen=True)
class FolderBundle:
    data: bytes
    files: int
    # Relative names left out because this user cannot read them: a file
    # they cannot read is no code of theirs to run (another user's database
    # in a shared folder, say); the job fails naming it if it needed one.
    unreadable: tuple[str, ...] = ()


def folder_bundle(root: Path, *, leave_out: Collection[Path] = ()) -> FolderBundle:
    """The bundle of a working folder: everything below ``root`` but
    SKIPPED_NAMES, ``*.pyc`` and the folders in ``leave_out`` (this
    machine's trainplane home, with its database and token), execute bits
    kept. Only regular files go in: a symlinked file with its target's
    content; symlinked folders are not followed; sockets, FIFOs and devices
    are left out. Raises BundleError, naming the biggest files, once the
    limits are passed."""
    entries, unreadable = _folder_entries(root, {folder.resolve() for folder in leave_out})
    files: list[tuple[str, bytes]] = []
    executable = set()
    for entry in entries:
        try:
            files.append((entry.name, entry.path.read_bytes()))
        except OSError:
            unreadable.append(entry.name)
            continue
        if entry.executable:
            executable.add(entry.name)
    data = build_bundle(files, executable=executable)
    if len(data) > MAX_BUNDLE_BYTES:
        raise BundleError(
            f"{root} zips to {len(data) >> 20} MiB, over the {MAX_BUNDLE_BYTES >> 20} MiB "
            f"a bundle may be{_biggest(entries)}: keep data out of the working folder and "
            "read it from storage"
        )
    return FolderBundle(data, len(files), tuple(sorted(unreadable)))


def bundle_of_folder(root: Path) -> bytes:
    """``folder_bundle``'s bytes."""
    return folder_bundle(root).data


def spec_with_bundle(spec: Mapping[str, Any], digest: str) -> dict[str, Any]:
    """``spec`` running in the uploaded bundle ``digest`` instead of its working_dir."""
    entrypoint = {key: value for key, value in spec["entrypoint"].items() if key != "working_dir"}
    return {**spec, "entrypoint": {**entrypoint, "code": digest}}


@dataclass(frozen=True)
class _FolderEntry:
    name: str  # relative, with forward slashes
    path: Path
    size: int
    executable: bool


def _folder_entries(root: Path, leave_out: set[Path]) -> tuple[list[_FolderEntry], list[str]]:
    """The regular files to bundle, and the names of those that cannot be read."""
    found: list[_FolderEntry] = []
    unreadable: list[str] = []
    total = 0

    def unlisted(error: OSError) -> None:
        if error.filename:
            unreadable.append(Path(error.filename).relative_to(root).as_posix() + "/")

    for folder, subfolders, names in os.walk(root, onerror=unlisted):
        subfolders[:] = [
            name
            for name in subfolders
            if name not in SKIPPED_NAMES and Path(folder, name).resolve() not in leave_out
        ]
        for name in names:
            path = Path(folder, name)
            if name in SKIPPED_NAMES or name.endswith(".pyc"):
                continue
            try:
                status = path.stat()  # follows a symlink: its target is what ships
            except OSError:
                continue  # a broken link: nothing to ship
            if not stat.S_ISREG(status.st_mode):
                continue  # sockets, FIFOs and devices are no code
            relative = path.relative_to(root).as_posix()
            if not os.access(path, os.R_OK):
                unreadable.append(relative)
                continue
            entry = _FolderEntry(relative, path, status.st_size, bool(status.st_mode & 0o111))
            found.append(entry)
            total += entry.size
            if len(found) > MAX_FILES or total > MAX_UNPACKED_BYTES:
                raise BundleError(
                    f"{root} holds more than {MAX_FILES} files or "
                    f"{MAX_UNPACKED_BYTES >> 20} MiB{_biggest(found)}: keep data and "
                    "environments out of the working folder and read data from storage"
                )
    return found, unreadable


def _biggest(entries: list[_FolderEntry], count: int = 3) -> str:
    largest = sorted(entries, key=lambda entry: entry.size, reverse=True)[:count]
    listed = ", ".join(f"{entry.name} ({entry.size / 2**20:.1f} MiB)" for entry in largest)
    return f"; the biggest: {listed}" if listed else ""


def check_bundle(data: bytes, *, max_bytes: int = MAX_BUNDLE_BYTES) -> BundleSummary:
    """Raise BundleError unless ``data`` is a zip of plain files with safe
    relative paths, within the limits."""
    if len(data) > max_bytes:
        raise BundleError(f"the bundle is {len(data)} bytes, over the {max_bytes} byte limit")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise BundleError(f"not a zip archive ({exc})") from None
    with archive:
        entries = [info for info in archive.infolist() if not info.is_dir()]
        if len(entries) > MAX_FILES:
            raise BundleError(f"{len(entries)} files, over the limit of {MAX_FILES}")
        for info in archive.infolist():
            check_member(info)
        unpacked = sum(info.file_size for info in entries)
        if unpacked > MAX_UNPACKED_BYTES:
            raise BundleError(
                f"the files unpack to {unpacked} bytes, over the {MAX_UNPACKED_BYTES} byte limit"
            )
        broken = archive.testzip()
        if broken is not None:
            raise BundleError(f"{broken}: corrupt in the archive")
    return BundleSummary(digest=digest_of(data), size_bytes=len(data), files=len(entries))


def bundle_folder(cache_dir: Path, digest: str) -> Path:
    """Where ``unpack_bundle`` puts the bundle of ``digest``."""
    return cache_dir / digest.removeprefix("sha256:")


def unpack_bundle(data: bytes, cache_dir: Path) -> Path:
    """The folder holding the bundle's files under ``cache_dir``, unpacked on
    first use. Folders are named by digest and appear whole (a rename), so a
    folder that exists is complete and concurrent callers agree."""
    folder = bundle_folder(cache_dir, digest_of(data))
    if folder.is_dir():
        return folder
    check_bundle(data)
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=cache_dir))
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            archive.extractall(staging)
            for info in archive.infolist():
                if (info.external_attr >> 16) & 0o111 and not info.is_dir():
                    os.chmod(staging / info.filename, 0o755)  # zipfile drops the mode
        try:
            os.rename(staging, folder)
        except OSError:
            if not folder.is_dir():  # not a concurrent unpack that won
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def check_member(info: zipfile.ZipInfo) -> None:
    """Raise BundleError unless the archive's entry is a plain file (or a
    folder) whose name stays inside the archive: no ``..``, no absolute name,
    no symlink."""
    safe_member_name(info.filename.removesuffix("/"))
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise BundleError(f"{info.filename!r} is a symlink; only plain files may be sent")
    if mode and not info.is_dir() and not stat.S_ISREG(mode):
        raise BundleError(f"{info.filename!r}: only plain files may be sent")


def safe_member_name(name: str) -> str:
    """``name`` when it is a relative path inside the archive; else BundleError."""
    path = PurePosixPath(name)
    if (
        not name
        or "\\" in name
        or "\x00" in name
        or path.is_absolute()
        or any(part in ("", "..") for part in name.split("/"))
    ):
        raise BundleError(f"{name!r}: bundle paths must be relative, inside the bundle")
    return name
