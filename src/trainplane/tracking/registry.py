"""Registering a job's exported model: log it to the job's run as the
artifact ``model`` and make it a version of ``register_model.name``.

Idempotent, because a tracking pass may be cut short anywhere and run again: a
version made from the run already is found and reused, so a job never gets two
versions, however often its finish is retried.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainplane.storage import exported_models as layout
from trainplane.storage.backends import StorageError, UnsafeEntry, open_storage
from trainplane.tracking.client import MlflowTracking, TrackingError

ARTIFACT_PATH = layout.ARTIFACT_NAME


class ModelUnavailable(Exception):
    """The job has no complete exported model to register; retrying will not help."""


@dataclass(frozen=True)
class Registration:
    name: str
    alias: str | None
    run_id: str
    model_root: str  # the job's model folder (trainplane.storage.exported_models)
    job_id: str
    project: str
    job_url: str | None


def register(
    mlflow: MlflowTracking, registration: Registration, *, still_ours: Callable[[], bool]
) -> str:
    """The model version made from the job's run; created if need be.
    ``still_ours`` is asked after the (long) upload: a pass that lost its
    lease meanwhile must leave the version to the pass that holds it."""
    r = registration
    version = mlflow.version_of_run(r.name, r.run_id)
    if version is None:
        extras = _log_model(mlflow, r)
        if not still_ours():
            raise TrackingError("lost the job's lease while uploading its model; retrying")
        link = f" ({r.job_url})" if r.job_url else ""
        tags = {"trainplane.job_id": r.job_id, "trainplane.project": r.project}
        # More models of the same run (a LoRA job's merged model), by their URI.
        tags.update({f"trainplane.{name}": f"runs:/{r.run_id}/{name}" for name in extras})
        version = mlflow.create_version(
            r.name,
            source=f"runs:/{r.run_id}/{ARTIFACT_PATH}",
            run_id=r.run_id,
            tags=tags,
            description=f"Trained by trainplane job {r.job_id}{link}.",
        )
    if r.alias:
        mlflow.set_alias(r.name, r.alias, version)
    return version


def _log_model(mlflow: MlflowTracking, r: Registration) -> list[str]:
    """Log the exported model (and its extras) to the run; the extras' names."""
    try:
        storage = open_storage(r.model_root)
        manifest, problem = layout.read_manifest(storage)
    except (StorageError, OSError, ImportError) as exc:
        # The storage may come back: not a reason to give up on the model.
        raise StorageError(f"cannot read the exported model at {r.model_root}: {exc}") from exc
    if manifest is None:
        raise ModelUnavailable(f"nothing registered: {problem}")
    # The manifest and the files are the job's (tenant data): its extras are
    # relative names (ModelManifest), and every file is copied out of the
    # storage into a scratch folder first, refusing keys with `..` and
    # symlinks (storage.backends), so nothing outside the model folder is
    # ever uploaded to the run or written on this machine.
    scratch = Path(tempfile.mkdtemp(prefix="trainplane-model-"))
    folders = {ARTIFACT_PATH: layout.MLFLOW_FOLDER, **manifest.extras}
    try:
        for artifact, source in folders.items():
            folder = scratch / "artifacts" / artifact
            try:
                storage.get_tree(source, folder)
            except UnsafeEntry as exc:
                raise ModelUnavailable(f"nothing registered: {exc}") from None
            mlflow.log_folder(r.run_id, str(folder), artifact)
            # The MLmodel file names the run it belongs to, as a logged model's does.
            patched = scratch / "patched" / artifact
            mlmodel = _with_run(folder / "MLmodel", patched, r.run_id, artifact)
            mlflow.log_file(r.run_id, str(mlmodel), artifact)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return list(manifest.extras)


def _with_run(mlmodel: Path, scratch: Path, run_id: str, artifact_path: str) -> Path:
    import yaml

    document = yaml.safe_load(mlmodel.read_text()) or {}
    document["run_id"] = run_id
    document["artifact_path"] = artifact_path
    patched = scratch / "patched" / "MLmodel"
    patched.parent.mkdir(parents=True, exist_ok=True)
    patched.write_text(yaml.safe_dump(document, sort_keys=False))
    return patched
