"""What a job's MLflow run holds: parameters, tags and metric names, derived
from the job's spec and attempts. Pure code.

Parameters are the spec's leaves by their dotted paths (the paths ``--set``
takes: ``strategy.deepspeed.stage``, ``entrypoint.args.lr``), plus what only
placement knows (``nodes``, ``cluster``, ``accelerator``). MLflow parameters
cannot change once logged, so everything that does (attempts, the final
status) is a tag.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trainplane.jobs.environment import redacted_spec
from trainplane.jobs.fields import flatten
from trainplane.jobs.states import JobStatus

TAG = "trainplane."
# Limits that every MLflow server version accepts (newer ones allow more).
MAX_KEY = 250
MAX_PARAM_VALUE = 500
MAX_TAG_VALUE = 5000
# Never parameters: tracking.tags become tags; these are tags.
HIDDEN_PATHS = ("tracking.tags",)
TAGGED_PATHS = ("name", "project", "kind")
_KEY_CHARACTERS = re.compile(r"[^A-Za-z0-9_\-. /]")

RUN_STATUS = {
    JobStatus.SUCCEEDED: "FINISHED",
    JobStatus.FAILED: "FAILED",
    JobStatus.CANCELLED: "KILLED",
}


@dataclass(frozen=True)
class AttemptFacts:
    """One attempt of a job, as the tracking needs it."""

    number: int
    id: str
    status: str
    cluster: str | None
    accelerator: str
    gpus: int
    price_per_gpu_hour: float
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    reason: str


def experiment_name(spec: Mapping[str, Any], project: str) -> str:
    if spec.get("kind") == "sweep":
        # A sweep's run is the parent of its trials' runs: in their experiment.
        spec = spec.get("trial") or {}
    return (spec.get("tracking") or {}).get("experiment") or project


def key(name: str) -> str:
    """A metric, parameter or tag name MLflow accepts."""
    return _KEY_CHARACTERS.sub("_", name)[:MAX_KEY] or "_"


def _text(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_params(spec: Mapping[str, Any], attempts: Sequence[AttemptFacts]) -> dict[str, str]:
    """Whoever reads the run sees entrypoint.env's names, never its values:
    MLflow's readers are not the project's members."""
    leaves = {
        path: value
        for path, value in flatten(redacted_spec(spec)).items()
        if value is not None
        and path not in TAGGED_PATHS
        and not any(path == h or path.startswith(f"{h}.") for h in HIDDEN_PATHS)
    }
    resources = spec.get("resources") or {}
    gpus = int(resources.get("gpus", 1))
    leaves["nodes"] = gpus // int(resources.get("gpus_per_node") or gpus)
    if attempts:
        # Parameters are fixed once logged: where the first attempt ran. Later
        # attempts' clusters are in their tags.
        leaves["cluster"] = attempts[0].cluster or "-"
        leaves["accelerator"] = attempts[0].accelerator
    return {key(path): _text(value, MAX_PARAM_VALUE) for path, value in leaves.items()}


def run_tags(
    *,
    job_id: str,
    project: str,
    kind: str,
    submitted_by: str,
    spec: Mapping[str, Any],
    version: str,
    job_url: str | None,
) -> dict[str, str]:
    entrypoint = spec.get("entrypoint") or {}
    source = entrypoint.get("function") or entrypoint.get("script") or kind
    tags = {
        key(k): _text(v, MAX_TAG_VALUE)
        for k, v in (spec.get("tracking") or {}).get("tags", {}).items()
    }
    tags.update(
        {
            "mlflow.user": submitted_by,
            "mlflow.source.type": "JOB",
            "mlflow.source.name": _text(source, MAX_TAG_VALUE),
            f"{TAG}job_id": job_id,
            f"{TAG}project": project,
            f"{TAG}kind": kind,
            f"{TAG}submitter": submitted_by,
            f"{TAG}version": version,
        }
    )
    if job_url:
        tags[f"{TAG}job_url"] = job_url
    return tags


def attempt_tags(attempts: Sequence[AttemptFacts]) -> dict[str, str]:
    tags = {f"{TAG}attempts": str(len(attempts))}
    for attempt in attempts:
        where = f" on {attempt.cluster}" if attempt.cluster else ""
        reason = f": {attempt.reason}" if attempt.reason else ""
        tags[f"{TAG}attempt.{attempt.number}"] = _text(
            f"{attempt.status}{where}{reason} (id {attempt.id})", MAX_TAG_VALUE
        )
    return tags


def attempts_signature(attempts: Sequence[AttemptFacts]) -> str:
    """Changes whenever the attempt tags would: stored to know they are current."""
    text = ",".join(f"{a.number}:{a.status}" for a in attempts)
    return text if len(text) <= 64 else hashlib.sha256(text.encode()).hexdigest()


def run_url(ui_base: str | None, experiment_id: str, run_id: str) -> str | None:
    if not ui_base:
        return None
    return f"{ui_base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
