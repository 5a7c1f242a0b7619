"""Sending what a spec names on this machine to a server that cannot read it.

A server takes the submitting machine's paths only when it is ``trainplane
up`` on this very machine: its ``/v1/whoami`` says ``server.local_paths``
and it answers on a loopback address. To any other server the spec's
``entrypoint.working_dir`` goes as a code bundle (named in
``entrypoint.code``) and a fine-tune's local ``base_model`` and datasets go
to the project's storage (``PUT /v1/projects/{p}/inputs/{digest}``), the spec
naming where they landed. Both are content-addressed: what the server has
already is not sent again, so a second submit of the same files sends
nothing but the spec.

``prepare`` is written once, without I/O of its own: a generator that yields
each request (a ``Call``) and is sent its answer, so the CLI, ``Client`` and
``AsyncClient`` each drive it with their session (``run_steps``,
``run_steps_async``). Everything it finds wrong is a LocalFilesError raised
before anything is uploaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Generator, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from pydantic import ValidationError

from trainplane.code_bundles import BundleError, digest_of, folder_bundle, spec_with_bundle
from trainplane.input_archives import (
    ArchiveError,
    archive_chunks,
    archive_digest,
    file_chunks,
    file_digest,
    folder_members,
)
from trainplane.jobs.spec import parse_spec
from trainplane.sdk import calls
from trainplane.sdk.credentials import LOOPBACK, local_token_path
from trainplane.sdk.local_files import (
    LocalFiles,
    LocalFilesError,
    check_code,
    check_inputs,
    local_files,
    set_field,
)
from trainplane.sdk.transport import Call

T = TypeVar("T")
Steps = Generator[Call[Any], Any, T]
Note = Callable[[str], None]

# Kept as the stored file's name; anything else becomes "_".
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._+=-]")
SHOWN_UNREADABLE = 5


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host in LOOPBACK or host.startswith("127.")


def prepare(
    document: dict[str, Any], *, url: str, upload: bool | None, note: Note
) -> Steps[dict[str, Any]]:
    """The spec to send. ``upload``: True sends the local files whatever
    the server, False sends their paths as they are (a server whose
    ``TRAINPLANE_SERVER_PATHS`` holds them), None decides by the server."""
    job = _job_part(document)
    files = local_files(job)
    if not files or upload is False or not _valid(document):
        return document
    with _fields_in_trial(document):
        check_code(job, files)
    if upload is None and is_loopback(url):
        facts = yield calls.whoami()
        if facts.server is not None and facts.server.local_paths:
            return document  # `trainplane up` on this machine reads them itself
    with _fields_in_trial(document):
        check_inputs(files)
        sent = yield from send_local_files(job, files, note)
    if job is document:
        return sent
    return {**document, "trial": {k: v for k, v in sent.items() if k != "project"}}


def _is_sweep(document: dict[str, Any]) -> bool:
    return document.get("kind") == "sweep" and isinstance(document.get("trial"), dict)


def _job_part(document: dict[str, Any]) -> dict[str, Any]:
    """What names the files: a sweep's trial (in the sweep's project), else the spec."""
    if not _is_sweep(document):
        return document
    return {**document["trial"], "project": document.get("project") or "default"}


@contextlib.contextmanager
def _fields_in_trial(document: dict[str, Any]) -> Iterator[None]:
    """A sweep's problems are its trial's fields (``trial.entrypoint.working_dir``)."""
    try:
        yield
    except LocalFilesError as exc:
        if not _is_sweep(document):
            raise
        raise LocalFilesError([(f"trial.{f}", message) for f, message in exc.problems]) from None


def _valid(document: dict[str, Any]) -> bool:
    """Whether the spec passes validation. One that does not goes as it is:
    the server names every field to fix, and no upload is worth making first."""
    try:
        parse_spec(document)
    except ValidationError:
        return False
    return True


def send_local_files(
    document: dict[str, Any], files: LocalFiles, note: Note
) -> Steps[dict[str, Any]]:
    project = document.get("project") or "default"
    if files.code is not None:
        digest = yield from _send_code(project, files.code, note)
        document = spec_with_bundle(document, digest)
    for name, path in files.inputs.items():
        location = yield from _send_input(project, name, path, note)
        document = set_field(document, name, location)
    return document


def _send_code(project: str, folder: Path, note: Note) -> Steps[str]:
    try:
        # This machine's trainplane home holds its database and admin token.
        bundle = folder_bundle(folder, leave_out=[local_token_path().parent])
    except BundleError as exc:
        raise LocalFilesError([("entrypoint.working_dir", str(exc))]) from None
    if bundle.unreadable:
        shown = ", ".join(bundle.unreadable[:SHOWN_UNREADABLE])
        more = len(bundle.unreadable) - SHOWN_UNREADABLE
        note(
            f"left out of {folder}: {shown}{f' and {more} more' if more > 0 else ''} "
            "(cannot be read)"
        )
    digest = digest_of(bundle.data)
    if (yield calls.bundle_if_any(project, digest)) is not None:
        note(f"code {folder}: the server has it already ({digest})")
        return digest
    stored = yield calls.upload_bundle(project, bundle.data)
    note(
        f"uploaded {folder} ({stored.files} files, {stored.size_bytes >> 10} KiB zipped) "
        f"as {digest}"
    )
    return digest


def _send_input(project: str, name: str, path: Path, note: Note) -> Steps[str]:
    folder = path.is_dir()
    try:
        if folder:
            members = folder_members(path)
            packed = archive_digest(members)
            chunks: Callable[[], Iterator[bytes]] = lambda: archive_chunks(members)  # noqa: E731
        else:
            packed = file_digest(path)
            chunks = lambda: file_chunks(path)  # noqa: E731
    except (ArchiveError, OSError) as exc:
        raise LocalFilesError([(name, f"cannot read {path}: {exc}")]) from None
    found = yield calls.input_if_any(project, packed.digest)
    if found is not None:
        note(f"{name} {path}: the server has it already ({packed.digest})")
        return found.location
    stored = yield calls.upload_input(
        project,
        packed.digest,
        packed.size_bytes,
        chunks,
        folder=folder,
        name=stored_name(path.name),
    )
    size = f"{packed.files} files, " if folder else ""
    note(f"uploaded {name} {path} ({size}{_size(packed.size_bytes)}) as {packed.digest}")
    return stored.location


def stored_name(name: str) -> str:
    """The file's name as the server keeps it: safe characters, no leading dot."""
    return _UNSAFE_NAME.sub("_", name).lstrip(".")[:200] or "data"


def _size(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.1f} {unit}"
    return f"{size} bytes"


def run_steps(steps: Steps[T], send: Callable[[Call[Any]], Any]) -> T:
    """Drive ``steps``, sending each call with ``send``; what they return."""
    try:
        call = next(steps)
        while True:
            call = steps.send(send(call))
    except StopIteration as done:
        return done.value


async def run_steps_async(steps: Steps[T], send: Callable[[Call[Any]], Awaitable[Any]]) -> T:
    """As ``run_steps``; the steps' own work (reading and hashing files) runs
    in a thread, off the event loop."""
    answer: Any = None
    while True:
        finished, value = await asyncio.to_thread(_advance, steps, answer)
        if finished:
            return value
        answer = await send(value)


def _advance(steps: Steps[T], answer: Any) -> tuple[bool, Any]:
    # StopIteration cannot cross into a Future: it is caught here, in the thread.
    try:
        return False, steps.send(answer)
    except StopIteration as done:
        return True, done.value
