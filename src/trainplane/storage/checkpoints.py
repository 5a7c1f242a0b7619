"""The checkpoint layout and its manifests.

A job's checkpoints live under ``<job folder>/checkpoints/`` (services.locations),
one folder per save, ``step-<N>/``. A folder counts as a checkpoint only once
its ``manifest.json`` exists, parses, names the folder's step and lists files
that are all there with their recorded sizes. The manifest is written last, so
a save that died half-way is never resumed from; such folders are removed by
the next save or resume. Deleting removes the manifest first for the same reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trainplane.storage.backends import Storage, UnsafeEntry, join
from trainplane.storage.containment import relative_parts
from trainplane.storage.files import missing_file

if TYPE_CHECKING:
    from trainplane.jobs.spec import Checkpoint

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
CHECKPOINTS_FOLDER = "checkpoints"  # in a job's folder
_STEP_FOLDER = re.compile(r"^step-(\d{1,12})$")


def step_folder(step: int) -> str:
    return f"step-{step}"


def folder_step(name: str) -> int | None:
    match = _STEP_FOLDER.match(name)
    return int(match.group(1)) if match else None


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    size: int = Field(ge=0)
    sha256: str

    @field_validator("path")
    @classmethod
    def _inside_the_folder(cls, value: str) -> str:
        # Written by the job: a path that leaves the folder makes the
        # manifest unreadable, so the folder never counts.
        relative_parts(value)
        return value


class Manifest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    version: int = MANIFEST_VERSION
    step: int = Field(ge=0)
    metrics: dict[str, float] = Field(default_factory=dict)
    strategy: str
    format: str  # how the files are laid out: "state-dict", "dcp", "deepspeed"
    world_size: int = Field(ge=1)
    files: list[FileEntry]
    job_id: str | None = None
    attempt_id: str | None = None
    # Why it was saved when it was: None by the job's policy or on request,
    # "preempted" just before the attempt stopped for a higher-priority job.
    reason: str | None = None
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @property
    def size_bytes(self) -> int:
        return sum(entry.size for entry in self.files)


@dataclass(frozen=True)
class CheckpointFolder:
    step: int
    name: str
    uri: str
    manifest: Manifest | None
    problem: str | None  # why it does not count, when it does not

    @property
    def complete(self) -> bool:
        return self.manifest is not None


def scan(storage: Storage) -> list[CheckpointFolder]:
    """Every step folder under the storage, oldest step first."""
    folders = []
    for name in storage.child_folders():
        step = folder_step(name)
        if step is None:
            continue
        manifest, problem = _check(storage, name, step)
        folders.append(CheckpointFolder(step, name, join(storage.uri, name), manifest, problem))
    return sorted(folders, key=lambda folder: folder.step)


def inspect(storage: Storage, name: str) -> CheckpointFolder | None:
    """One step folder, complete or not; None when nothing is there."""
    step = folder_step(name)
    if step is None:
        return None
    manifest, problem = _check(storage, name, step)
    if manifest is None and not storage.sizes(name):
        return None
    return CheckpointFolder(step, name, join(storage.uri, name), manifest, problem)


def complete_checkpoints(storage: Storage) -> list[CheckpointFolder]:
    return [folder for folder in scan(storage) if folder.complete]


def latest_complete(storage: Storage) -> CheckpointFolder | None:
    complete = complete_checkpoints(storage)
    return complete[-1] if complete else None


def _check(storage: Storage, name: str, step: int) -> tuple[Manifest | None, str | None]:
    try:
        raw = storage.read_bytes(f"{name}/{MANIFEST}")
    except UnsafeEntry as exc:
        return None, str(exc)
    if raw is None:
        return None, "no manifest (the save did not finish)"
    try:
        manifest = Manifest.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        return None, f"unreadable manifest: {str(exc).splitlines()[0]}"
    if manifest.step != step:
        return None, f"manifest says step {manifest.step}, folder says {step}"
    problem = missing_file(storage, name, manifest.files)
    if problem is not None:
        return None, problem
    return manifest, None


def write_manifest(storage: Storage, manifest: Manifest) -> None:
    payload = manifest.model_dump(mode="json")
    storage.write_bytes(
        f"{step_folder(manifest.step)}/{MANIFEST}", json.dumps(payload, indent=1).encode()
    )


def remove(storage: Storage, name: str) -> None:
    """Manifest first: a folder half-deleted is incomplete, never a broken checkpoint."""
    storage.delete(f"{name}/{MANIFEST}")
    storage.delete_tree(name)


def retention_victims(
    complete: list[CheckpointFolder],
    *,
    keep_last: int,
    keep_best_metric: str | None = None,
    keep_best_mode: str = "min",
) -> list[CheckpointFolder]:
    """The complete checkpoints a policy no longer keeps: all but the newest
    ``keep_last``, except the best one by the metric when ``keep_best`` is set."""
    by_step = sorted(complete, key=lambda folder: folder.step)
    keep = {folder.step for folder in by_step[-keep_last:]}
    if keep_best_metric is not None:
        scored = [
            folder
            for folder in by_step
            if folder.manifest is not None and keep_best_metric in folder.manifest.metrics
        ]
        if scored:

            def score(folder: CheckpointFolder) -> float:
                assert folder.manifest is not None
                value = folder.manifest.metrics[keep_best_metric]
                return value if keep_best_mode == "min" else -value

            # On ties the newest wins.
            best = min(reversed(scored), key=score)
            keep.add(best.step)
    return [folder for folder in by_step if folder.step not in keep]


def apply_retention(storage: Storage, policy: Checkpoint, newest: int) -> None:
    """Removes the complete checkpoints ``policy`` (a job's checkpoint
    section) no longer keeps, and the unfinished saves older than ``newest``
    (the step just saved): those can never complete now. For train functions
    and scripts alike."""
    folders = scan(storage)
    best = policy.keep_best
    victims = retention_victims(
        [folder for folder in folders if folder.complete],
        keep_last=policy.keep_last,
        **({"keep_best_metric": best.metric, "keep_best_mode": best.mode} if best else {}),
    )
    victims += [f for f in folders if not f.complete and f.step < newest]
    for folder in victims:
        remove(storage, folder.name)


def describe(folder: CheckpointFolder) -> dict[str, Any]:
    """What the API shows for one complete checkpoint."""
    assert folder.manifest is not None
    manifest = folder.manifest
    return {
        "step": folder.step,
        "uri": folder.uri,
        "created_at": manifest.created_at,
        "metrics": manifest.metrics,
        "strategy": manifest.strategy,
        "format": manifest.format,
        "world_size": manifest.world_size,
        "files": len(manifest.files),
        "size_bytes": manifest.size_bytes,
        "attempt_id": manifest.attempt_id,
    }
