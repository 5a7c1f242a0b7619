"""Where a job's files live: its checkpoints and its exported model.

The one place these locations are computed: the scheduler hands them to the
runtime at launch, and the API and the tracking loop read those same folders.
A job's folder is fixed at submit (``jobs.folder``, under its project's
storage root: services.file_access); jobs submitted before it was kept use
``<storage>/<project>/<job-id>`` as they always did.
"""

from __future__ import annotations

from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.storage.backends import join
from trainplane.storage.checkpoints import CHECKPOINTS_FOLDER
from trainplane.storage.exported_models import MODEL_FOLDER


def job_folder(
    folder: str | None,
    spec: TrainSpec | FinetuneSpec,
    project: str,
    job_id: str,
    default_storage: str,
) -> str:
    """``folder`` (jobs.folder) when the job has one; else where a job
    submitted before it was kept has its files: under the spec's
    checkpoint.storage, or ``default_storage`` (Settings.checkpoint_storage)."""
    if folder:
        return folder
    storage = spec.checkpoint.storage or default_storage
    return join(storage, project, job_id)


def checkpoint_root(
    folder: str | None,
    spec: TrainSpec | FinetuneSpec,
    project: str,
    job_id: str,
    default_storage: str,
) -> str:
    """The folder of the job's ``step-<N>/`` checkpoints."""
    return join(job_folder(folder, spec, project, job_id, default_storage), CHECKPOINTS_FOLDER)


def model_root(
    folder: str | None,
    spec: TrainSpec | FinetuneSpec,
    project: str,
    job_id: str,
    default_storage: str,
) -> str:
    """Where a job with register_model exports its trained model, beside its checkpoints."""
    return join(job_folder(folder, spec, project, job_id, default_storage), MODEL_FOLDER)
