"""Where a job's files live: its checkpoints and its exported model.

The one place these locations are computed: the scheduler hands them to the
runtime at launch, and the API and the tracking loop read those same folders.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainplane.storage.checkpoints import job_checkpoint_root
from trainplane.storage.models import job_model_root


def checkpoint_root(
    spec: Mapping[str, Any], project: str, job_id: str, default_storage: str
) -> str:
    """``<storage>/<project>/<job-id>/checkpoints``, where storage is the spec's
    checkpoint.storage or else ``default_storage`` (Settings.checkpoint_storage)."""
    return job_checkpoint_root(_storage(spec, default_storage), project, job_id)


def model_root(spec: Mapping[str, Any], project: str, job_id: str, default_storage: str) -> str:
    """``<storage>/<project>/<job-id>/model``: where a job with register_model
    exports its trained model, beside its checkpoints."""
    return job_model_root(_storage(spec, default_storage), project, job_id)


def _storage(spec: Mapping[str, Any], default_storage: str) -> str:
    return (spec.get("checkpoint") or {}).get("storage") or default_storage
