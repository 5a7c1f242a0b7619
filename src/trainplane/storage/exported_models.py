"""The model a job exports when it ends well: ``<job folder>/model/`` (services.locations).

The runtime writes an MLflow model folder (``mlflow/``: ``MLmodel``, the
weights, the environment files) and then ``manifest.json`` last, listing every
file with its size and checksum. The control plane registers the model only
from a folder whose manifest checks out, so an export that died half-way is
never registered. A new export replaces the old one manifest first.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trainplane.storage import files
from trainplane.storage.backends import Storage, UnsafeEntry
from trainplane.storage.checkpoints import FileEntry
from trainplane.storage.containment import UnsafePath, relative_parts

MANIFEST = "manifest.json"
MODEL_FOLDER = "model"  # in a job's folder
MLFLOW_FOLDER = "mlflow"  # the MLflow model, as the artifact `model` of the run
MANIFEST_VERSION = 1
ARTIFACT_NAME = "model"  # the run's artifact the main model is logged as


class ModelManifest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    version: int = MANIFEST_VERSION
    flavor: str = Field(description="The MLflow flavor: pytorch, transformers.")
    serialization: str = Field(description="How the weights are stored: pt2, pickle, ...")
    step: int = Field(ge=0, description="The training step the model is from.")
    metrics: dict[str, float] = Field(default_factory=dict)
    strategy: str
    world_size: int = Field(ge=1)
    extras: dict[str, str] = Field(
        default_factory=dict,
        description="More MLflow models logged to the run: artifact name -> folder "
        "(a LoRA job's merged model).",
    )
    files: list[FileEntry] = Field(description="Paths relative to the model folder.")
    job_id: str | None = None
    attempt_id: str | None = None
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @property
    def size_bytes(self) -> int:
        return sum(entry.size for entry in self.files)

    @field_validator("extras")
    @classmethod
    def _extras_inside_the_folder(cls, extras: dict[str, str]) -> dict[str, str]:
        # Written by the job: each artifact name and folder must stay inside
        # the model folder (and the run), and none may stand in for `model`.
        for name, folder in extras.items():
            if name == ARTIFACT_NAME:
                raise UnsafePath(f"extras: '{ARTIFACT_NAME}' is the main model's name")
            relative_parts(name)
            relative_parts(folder)
        return extras


def write_manifest(storage: Storage, manifest: ModelManifest) -> None:
    payload = manifest.model_dump(mode="json")
    storage.write_bytes(MANIFEST, json.dumps(payload, indent=1).encode())


def read_manifest(storage: Storage) -> tuple[ModelManifest | None, str]:
    """The manifest of a complete export, or None and why there is none."""
    try:
        raw = storage.read_bytes(MANIFEST)
    except UnsafeEntry as exc:
        return None, str(exc)
    if raw is None:
        return None, f"no exported model at {storage.uri} (no {MANIFEST})"
    try:
        manifest = ModelManifest.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        return None, f"unreadable {storage.uri}/{MANIFEST}: {str(exc).splitlines()[0]}"
    problem = files.missing_file(storage, "", manifest.files)
    if problem is not None:
        return None, f"incomplete model export at {storage.uri}: {problem}"
    return manifest, ""


def clear(storage: Storage) -> None:
    """Manifest first: a half-deleted export is incomplete, never a broken model."""
    storage.delete(MANIFEST)
    for folder in storage.child_folders():
        if folder != files.STAGING:  # the new export being written
            storage.delete_tree(folder)
