"""The local folders a script or command job's ranks get on each node.

Every node of an attempt has one scratch folder,
``<tempdir>/trainplane-<attempt-id>``, shared by its ranks like a torchrun
output_dir: ``checkpoints/`` (TRAINPLANE_CHECKPOINT_DIR), ``model/``
(TRAINPLANE_MODEL_DIR), ``.sync/`` (TRAINPLANE_SYNC_DIR) and, when the
checkpoint to resume from is on S3, ``resume/`` (TRAINPLANE_RESUME_FROM),
downloaded once for the node. Each rank's supervisor (a RankWorker, or the
driver for one inline worker) claims the folder under a file lock before its
rank starts and gives up its claim when the rank is done; the last one out
removes the folder. A supervisor killed with its gang cannot give its claim
up: the next attempt to start on the node removes scratch folders no living
process claims.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from trainplane.runtime import env as tp_env
from trainplane.storage.backends import LocalStorage, open_storage

SCRATCH_PREFIX = "trainplane-"
CLAIMS = ".claims"
LOCK = ".lock"
REMOVED = ".removed-"  # the name of a scratch folder being removed: <root>.removed-<pid>


@dataclass(frozen=True)
class NodeFolders:
    root: Path

    @classmethod
    def for_attempt(cls, attempt_id: str) -> NodeFolders:
        return cls(Path(tempfile.gettempdir()) / f"{SCRATCH_PREFIX}{attempt_id}")

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def sync(self) -> Path:
        return self.root / ".sync"

    @property
    def resume(self) -> Path:
        return self.root / "resume"


def enter(folders: NodeFolders, *, resume: str | None, nodes: int) -> dict[str, str]:
    """Claims the node's scratch for this process and returns what the rank's
    environment gets. ``resume`` is the URI of the complete checkpoint the
    driver chose (``<storage>/step-<N>``), fetched here once per node."""
    remove_abandoned(folders.root.parent)
    folders.root.mkdir(parents=True, exist_ok=True)
    with _locked(folders.root):
        for folder in (folders.checkpoints, folders.model, folders.sync, folders.root / CLAIMS):
            folder.mkdir(parents=True, exist_ok=True)
        (folders.root / CLAIMS / str(os.getpid())).touch()
        local_resume = _fetch(resume, folders) if resume else None
    env = {
        tp_env.CHECKPOINT_DIR: str(folders.checkpoints),
        tp_env.MODEL_DIR: str(folders.model),
        tp_env.SYNC_DIR: str(folders.sync),
        tp_env.NODES: str(nodes),
    }
    if local_resume is not None:
        env[tp_env.RESUME_FROM] = str(local_resume)
    return env


def leave(folders: NodeFolders) -> None:
    """Gives up this process's claim; the last claim out removes the folder."""
    if not folders.root.is_dir():
        return
    with contextlib.suppress(FileNotFoundError), _locked(folders.root):
        claims = folders.root / CLAIMS
        (claims / str(os.getpid())).unlink(missing_ok=True)
        if not claims.is_dir() or not any(claims.iterdir()):
            _discard(folders.root)


def remove_abandoned(tempdir: Path) -> list[Path]:
    """Removes the scratch folders under ``tempdir`` whose every claimant is
    dead (supervisors killed with their gang), and what an interrupted
    removal left. A folder being set up holds its lock, and is skipped."""
    removed = []
    for root in tempdir.glob(f"{SCRATCH_PREFIX}*"):
        if REMOVED in root.name:
            shutil.rmtree(root, ignore_errors=True)
            continue
        claims = root / CLAIMS
        if not claims.is_dir():
            continue  # not a scratch folder of this module's making
        try:
            with _locked(root, wait=False):
                if any(_alive(claim.name) for claim in claims.iterdir()):
                    continue
                _discard(root)
        except (BlockingIOError, FileNotFoundError):
            continue
        removed.append(root)
    return removed


def _discard(root: Path) -> None:
    """Removes ``root`` (its lock held): renamed out of the way first, so that
    a supervisor killed halfway (Ray interrupts, then kills, an actor it
    stops) leaves a whole scratch folder or a renamed one, both of which the
    next sweep removes."""
    gone = root.with_name(f"{root.name}{REMOVED}{os.getpid()}")
    root.rename(gone)
    shutil.rmtree(gone, ignore_errors=True)


def _fetch(resume: str, folders: NodeFolders) -> Path:
    """A local folder with the checkpoint ``resume``: the published folder
    itself on a local storage, else the node's one download of it."""
    parent, _, name = resume.rstrip("/").rpartition("/")
    storage = open_storage(parent)
    if isinstance(storage, LocalStorage):
        return storage.local_folder(name)
    if not folders.resume.is_dir():
        partial = folders.root / "resume.partial"
        shutil.rmtree(partial, ignore_errors=True)
        storage.get_tree(name, partial)
        partial.rename(folders.resume)
    return folders.resume


@contextlib.contextmanager
def _locked(root: Path, *, wait: bool = True) -> Iterator[None]:
    with open(root / LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True  # someone else's process, or a name we did not write
    return True
