"""Which of a job's checkpoints are complete, as the API lists them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from trainplane.db.engine import read_only
from trainplane.errors import UpstreamError
from trainplane.jobs.spec import load_spec
from trainplane.services.access import Caller
from trainplane.services.jobs import load_job
from trainplane.services.locations import checkpoint_root
from trainplane.storage.backends import StorageError, open_storage
from trainplane.storage.checkpoints import complete_checkpoints, describe


@dataclass(frozen=True)
class JobCheckpoints:
    job_id: str
    storage: str  # the job's checkpoint folder
    checkpoints: list[dict[str, Any]]  # storage.checkpoints.describe(), newest step first


def list_checkpoints(
    session: Session, caller: Caller, job_id: str, *, default_storage: str
) -> JobCheckpoints:
    with read_only(session):
        job = load_job(session, caller, job_id)
        root = checkpoint_root(
            job.folder, load_spec(job.spec), job.project_name, job.id, default_storage
        )
    # The storage is read with no transaction open: S3 listings take their time.
    try:
        folders = complete_checkpoints(open_storage(root))
    # ImportError: reading s3:// needs boto3, which a server may not have installed.
    except (StorageError, OSError, ImportError) as exc:
        raise UpstreamError(f"cannot read checkpoint storage {root}: {exc}") from exc
    return JobCheckpoints(job.id, root, [describe(folder) for folder in reversed(folders)])
