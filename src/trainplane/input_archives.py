"""Input files as uploads: a fine-tune's base model folder and datasets sent
to the project's storage, named by the SHA-256 of the bytes sent.

A file goes as it is. A folder goes as a zip built the same way every time
(names sorted, fixed timestamps and modes, nothing compressed: model weights
do not compress, and storing them keeps packing as fast as reading), so the
same files make the same digest and a second upload is skipped. The zip is
produced as a stream: a client hashes it in one pass and sends it in a
second, so a model of many gigabytes is never held in memory or copied to a
temporary file.

The server's half checks an archive before anything of it is written
(``check_archive``: names inside the folder, regular files only, within the
limits) and unpacks it in bounded chunks (``extract_archive``).

Pure functions over files, shared by the clients and the server.
"""

from __future__ import annotations

import hashlib
import os
import stat
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from trainplane.code_bundles import SKIPPED_NAMES, BundleError, check_member, safe_member_name

CHUNK_BYTES = 1 << 20
MAX_ARCHIVE_FILES = 10_000
# A fixed timestamp: the same files always make the same archive.
_EPOCH = (1980, 1, 1, 0, 0, 0)
# Left out of a model folder besides SKIPPED_NAMES: a hub download's cache.
_SKIPPED_FOLDERS = SKIPPED_NAMES | {".cache"}


class ArchiveError(ValueError):
    """The archive is not one trainplane unpacks; the message says why."""


@dataclass(frozen=True)
class Packed:
    """What a client is about to upload: its digest, size and file count."""

    digest: str  # sha256:<hex> of the bytes sent
    size_bytes: int
    files: int


@dataclass(frozen=True)
class Member:
    name: str  # relative, with forward slashes
    path: Path
    size: int


def file_digest(path: Path) -> Packed:
    """The digest and size of one file, read in chunks."""
    hasher = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            hasher.update(chunk)
            size += len(chunk)
    return Packed("sha256:" + hasher.hexdigest(), size, 1)


def file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            yield chunk


def folder_members(root: Path) -> list[Member]:
    """The regular files below ``root`` that a folder upload carries, sorted:
    version control, environments and caches are left out, symlinked files
    go in with their target's content. Raises ArchiveError for a file that
    cannot be read (a model missing a shard would fail much later)."""
    found = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders if name not in _SKIPPED_FOLDERS)
        for name in names:
            path = Path(folder, name)
            try:
                status = path.stat()
            except OSError:
                continue  # a broken link
            if not stat.S_ISREG(status.st_mode) or name.endswith(".pyc"):
                continue
            if not os.access(path, os.R_OK):
                raise ArchiveError(f"{path} cannot be read")
            found.append(Member(path.relative_to(root).as_posix(), path, status.st_size))
    if len(found) > MAX_ARCHIVE_FILES:
        raise ArchiveError(f"{root} holds {len(found)} files, over {MAX_ARCHIVE_FILES}")
    return sorted(found, key=lambda member: member.name)


class _Sink:
    """A write-only stream whose bytes a generator hands on as they come; not
    seekable, so zipfile writes each member's sizes after its data."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def drain(self) -> Iterator[bytes]:
        parts, self._parts = self._parts, []
        yield from parts


def archive_chunks(members: Iterable[Member]) -> Iterator[bytes]:
    """The folder's zip, as it is written: byte for byte the same for the
    same files."""
    sink = _Sink()
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for member in members:
            info = zipfile.ZipInfo(safe_member_name(member.name), date_time=_EPOCH)
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.file_size = member.size  # decides, the same way each time, on zip64
            with open(member.path, "rb") as source, archive.open(info, "w") as target:
                while chunk := source.read(CHUNK_BYTES):
                    target.write(chunk)
                    yield from sink.drain()
            yield from sink.drain()
    yield from sink.drain()


def archive_digest(members: list[Member]) -> Packed:
    hasher = hashlib.sha256()
    size = 0
    for chunk in archive_chunks(members):
        hasher.update(chunk)
        size += len(chunk)
    return Packed("sha256:" + hasher.hexdigest(), size, len(members))


# --- the server's half ----------------------------------------------------------------


@dataclass(frozen=True)
class ArchiveSummary:
    files: int
    size_bytes: int  # unpacked


def check_archive(path: Path, *, max_unpacked_bytes: int) -> ArchiveSummary:
    """Raise ArchiveError unless the zip at ``path`` holds only regular files
    with relative names inside the folder (no ``..``, no absolute name, no
    symlink), at most MAX_ARCHIVE_FILES of them, unpacking to at most
    ``max_unpacked_bytes``."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ArchiveError(f"not a zip archive ({exc})") from None
    with archive:
        members = [info for info in archive.infolist() if not info.is_dir()]
        if len(members) > MAX_ARCHIVE_FILES:
            raise ArchiveError(f"{len(members)} files, over the limit of {MAX_ARCHIVE_FILES}")
        try:
            for info in archive.infolist():
                check_member(info)
        except BundleError as exc:
            raise ArchiveError(str(exc)) from None
        unpacked = sum(info.file_size for info in members)
        if unpacked > max_unpacked_bytes:
            raise ArchiveError(
                f"the files unpack to {unpacked} bytes, over the {max_unpacked_bytes} byte limit"
            )
    return ArchiveSummary(files=len(members), size_bytes=unpacked)


def extract_archive(path: Path, target: Path) -> None:
    """Unpack a zip that ``check_archive`` accepted into ``target``, each
    member copied in chunks; a member whose bytes do not match its checksum
    raises ArchiveError."""
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            destination = target.joinpath(*info.filename.removesuffix("/").split("/"))
            if info.is_dir():
                destination.mkdir(parents=True, exist_ok=True)
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            try:
                with archive.open(info) as source, open(destination, "xb") as sink:
                    while chunk := source.read(CHUNK_BYTES):
                        sink.write(chunk)
            except zipfile.BadZipFile as exc:
                raise ArchiveError(f"{info.filename}: corrupt in the archive ({exc})") from None
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                raise ArchiveError(
                    f"{info.filename!r} clashes with another name in the archive"
                ) from None
