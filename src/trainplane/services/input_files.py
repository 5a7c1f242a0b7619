"""Input files uploaded to a project's storage: a fine-tune's base model
folder and datasets, sent by a client that shares no filesystem with the
server (DESIGN.md "Trust boundaries").

Each upload is named by the SHA-256 of its bytes and lands, once, under the
project's storage root: ``<root>/inputs/<hex>/`` holds the file (under the
name it was sent with) or the unpacked folder, and ``<root>/inputs/<hex>.json``
is its manifest, written last. An input exists once its manifest does; a spec
then names its location like any path of the project's own storage.

Nothing is read before the caller's role in the project is checked, and
nothing is published before the whole body has arrived and its digest
matches: the body is received into a private staging folder, unpacked
there, and published by one rename (a local root) or by uploading the files
before the manifest (an S3 root). An upload cut short leaves nothing behind
but its staging folder, removed when the request ends (or, after a crash,
by a later upload once it is a day old).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from anyio import to_thread
from sqlalchemy.orm import Session

from trainplane.db.base import utcnow
from trainplane.errors import InvalidInputError, NotFoundError, UpstreamError
from trainplane.input_archives import ArchiveError, check_archive, extract_archive
from trainplane.services.access import Caller, Role
from trainplane.services.file_access import FileAccess, ProjectRef
from trainplane.services.projects import project_for
from trainplane.storage.backends import LocalStorage, Storage, StorageError, join, open_storage

InputKind = Literal["file", "folder"]
INPUTS_FOLDER = "inputs"
STAGING_FOLDER = ".incoming"
STALE_STAGING_SECONDS = 24 * 3600
# The body is written and hashed off the event loop, this much at a time.
WRITE_BYTES = 4 << 20
# A file's own name, kept so that what reads it sees train.jsonl, not a digest.
FILE_NAME_PATTERN = r"^[A-Za-z0-9_+=-][A-Za-z0-9._+=-]{0,199}$"
_FILE_NAME = re.compile(FILE_NAME_PATTERN)
DEFAULT_FILE_NAME = "data"


@dataclass(frozen=True)
class InputView:
    digest: str
    project: str
    kind: InputKind
    location: str  # what a spec names: the file, or the folder
    size_bytes: int  # a file's size; a folder's files together
    files: int
    created_at: datetime


@dataclass(frozen=True)
class InputUpload:
    input: InputView
    created: bool  # False: the project had these bytes already


def get_input(
    session: Session, caller: Caller, access: FileAccess, project_name: str, digest: str
) -> InputView:
    project = project_for(session, caller, project_name, Role.VIEWER, "reading input files")
    found = _find(_storage(access, project), project, digest)
    if found is None:
        raise NotFoundError(f"project '{project.name}' has no input {digest}")
    return found


async def upload_input(
    session: Session,
    caller: Caller,
    access: FileAccess,
    *,
    project_name: str,
    digest: str,
    kind: InputKind,
    name: str | None,
    body: AsyncIterator[bytes],
    max_bytes: int,
) -> InputUpload:
    """Receive ``body`` (a file, or a zip of a folder) and publish it under
    the project's root as ``digest``. The caller must be a member of the
    project; the body is not read until that is known, nor at all when the
    project has the digest already."""
    file_name = _file_name(name) if kind == "file" else None
    project = await to_thread.run_sync(
        project_for, session, caller, project_name, Role.MEMBER, "uploading input files"
    )
    storage = await to_thread.run_sync(_storage, access, project)
    found = await to_thread.run_sync(_find, storage, project, digest)
    if found is not None:
        return InputUpload(found, created=False)
    staging = await to_thread.run_sync(_staging_folder, storage)
    try:
        received = await _receive(body, staging / "body")
        if received != digest:
            raise InvalidInputError(
                "digest",
                f"the body's digest is {received}, not {digest}: it changed or was cut "
                "short on the way; send it again",
            )
        published = _Publication(storage, project, digest, kind, file_name, caller.subject)
        return await to_thread.run_sync(published.publish, staging, max_bytes)
    finally:
        await to_thread.run_sync(shutil.rmtree, staging, True)


def _file_name(name: str | None) -> str:
    if name is None:
        return DEFAULT_FILE_NAME
    if not _FILE_NAME.fullmatch(name):
        raise InvalidInputError(
            "name",
            f"{name!r} is not a file name trainplane keeps: letters, digits and ._+=- only, "
            "not starting with a dot, at most 200 characters",
        )
    return name


async def _receive(body: AsyncIterator[bytes], target: Path) -> str:
    """Write the body to ``target``; its digest. The size limit is the
    request's (``BodySizeLimit`` ends the stream past it)."""
    hasher = hashlib.sha256()
    pending: list[bytes] = []
    held = 0

    def write(handle: object, parts: list[bytes]) -> None:
        for part in parts:
            hasher.update(part)
            handle.write(part)  # type: ignore[attr-defined]

    handle = await to_thread.run_sync(open, target, "xb")
    try:
        async for chunk in body:
            pending.append(chunk)
            held += len(chunk)
            if held >= WRITE_BYTES:
                await to_thread.run_sync(write, handle, pending)
                pending, held = [], 0
        await to_thread.run_sync(write, handle, pending)
    finally:
        await to_thread.run_sync(handle.close)
    return "sha256:" + hasher.hexdigest()


def _storage(access: FileAccess, project: ProjectRef) -> Storage:
    try:
        return open_storage(join(access.project_root(project), INPUTS_FOLDER))
    except StorageError as exc:
        raise UpstreamError(f"project '{project.name}' storage: {exc}") from None


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def _find(storage: Storage, project: ProjectRef, digest: str) -> InputView | None:
    try:
        raw = storage.read_bytes(f"{_hex(digest)}.json")
    except StorageError as exc:
        raise UpstreamError(f"cannot read project '{project.name}' inputs: {exc}") from None
    if raw is None:
        return None
    manifest = json.loads(raw)
    folder = join(storage.uri, _hex(digest))
    location = join(folder, manifest["name"]) if manifest["kind"] == "file" else folder
    return InputView(
        digest=digest,
        project=project.name,
        kind=manifest["kind"],
        location=location,
        size_bytes=manifest["size_bytes"],
        files=manifest["files"],
        created_at=datetime.fromisoformat(manifest["created_at"]),
    )


def _staging_folder(storage: Storage) -> Path:
    """A private folder for one upload: beside the inputs for a local root
    (so publishing is a rename), else in the system's temporary folder.
    Leftovers of crashed uploads older than a day go first."""
    if not isinstance(storage, LocalStorage):
        return Path(tempfile.mkdtemp(prefix="trainplane-input-"))
    parent = storage.local_folder(STAGING_FOLDER)
    parent.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - STALE_STAGING_SECONDS
    for leftover in parent.iterdir():
        try:
            if leftover.stat().st_mtime < cutoff:
                shutil.rmtree(leftover, ignore_errors=True)
        except OSError:
            continue  # another upload removed it first
    return Path(tempfile.mkdtemp(prefix="upload-", dir=parent))


@dataclass(frozen=True)
class _Publication:
    storage: Storage
    project: ProjectRef
    digest: str
    kind: InputKind
    file_name: str | None
    subject: str

    def publish(self, staging: Path, max_bytes: int) -> InputUpload:
        content = staging / "content"
        files, size = self._unpack(staging / "body", content, max_bytes)
        try:
            found = _find(self.storage, self.project, self.digest)
            if found is not None:  # a concurrent upload of the same bytes won
                return InputUpload(found, created=False)
            if isinstance(self.storage, LocalStorage):
                self._rename_into_place(content)
            else:
                for path in sorted(content.rglob("*")):
                    if path.is_file():
                        relative = path.relative_to(content).as_posix()
                        self.storage.put_file(path, f"{_hex(self.digest)}/{relative}")
            manifest = {
                "digest": self.digest,
                "kind": self.kind,
                "name": self.file_name,
                "files": files,
                "size_bytes": size,
                "created_at": utcnow().isoformat(),
                "created_by": self.subject,
            }
            self.storage.write_bytes(f"{_hex(self.digest)}.json", json.dumps(manifest).encode())
        except (StorageError, OSError) as exc:
            raise UpstreamError(
                f"cannot store the input in project '{self.project.name}' storage: {exc}"
            ) from None
        published = _find(self.storage, self.project, self.digest)
        assert published is not None
        return InputUpload(published, created=True)

    def _unpack(self, body: Path, content: Path, max_bytes: int) -> tuple[int, int]:
        """The staged body as the folder to publish; its file count and size."""
        content.mkdir()
        if self.kind == "file":
            assert self.file_name is not None
            size = body.stat().st_size
            os.replace(body, content / self.file_name)
            return 1, size
        try:
            summary = check_archive(body, max_unpacked_bytes=max_bytes)
            extract_archive(body, content)
        except ArchiveError as exc:
            raise InvalidInputError("body", f"the folder's zip: {exc}") from None
        body.unlink()
        return summary.files, summary.size_bytes

    def _rename_into_place(self, content: Path) -> None:
        assert isinstance(self.storage, LocalStorage)
        target = self.storage.local_folder(_hex(self.digest))
        try:
            os.rename(content, target)
        except OSError:
            # Only a rename ever makes this folder, of bytes checked against
            # the digest: one that is there already (a concurrent upload, or a
            # crash before its manifest) holds these very files.
            if not target.is_dir():
                raise
