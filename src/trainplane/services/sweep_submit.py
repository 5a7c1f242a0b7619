"""Submitting a sweep: its row (kind ``sweep``, QUEUED, never placed) after
the checks a job's submit makes, run on the trial specs that between them
show everything the sweep's trials may name.

The spec's own validation (jobs.sweep_spec) tried every value of every
parameter; here each value of a parameter that names a place, a size or a
secret (anything but ``entrypoint.args``) is checked against this server:
its locations, inputs, code, secrets, clusters and the project's quota.
Errors name the field as the sweep spells it: ``parameters.<path>`` for a
swept path, ``trial.<field>`` for the template's own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.orm import Session

from trainplane.db.base import utcnow
from trainplane.db.models import Job, Project
from trainplane.errors import InvalidInputError, InvalidInputsError
from trainplane.ids import new_id
from trainplane.jobs.entrypoints import wanted_secrets
from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.jobs.spec_sections import Priority
from trainplane.jobs.states import JobStatus
from trainplane.jobs.sweep_spec import SweepSpec
from trainplane.services.access import Caller, Role
from trainplane.services.bundles import check_spec_code
from trainplane.services.file_access import (
    FileAccess,
    ProjectRef,
    check_spec_locations,
    job_folder,
)
from trainplane.services.job_inputs import check_job_inputs
from trainplane.services.names import check_names
from trainplane.services.projects import project_for
from trainplane.services.secrets import check_secret_refs
from trainplane.services.status import record_submission
from trainplane.services.storage_access import check_checkpoint_storage
from trainplane.services.submissions import (
    Submission,
    check_quota_can_hold,
    check_some_cluster_can_hold,
    commit_submission,
    insert_job,
    spec_fingerprint,
    strategy_for,
)

SWEEP_QUEUED_REASON = "waiting for the scheduler to start its trials"
# Swept paths that change nothing a submit checks: one value stands for all.
_UNCHECKED_PREFIXES = ("entrypoint.args.",)


def submit_sweep(
    session: Session,
    caller: Caller,
    spec: SweepSpec,
    *,
    access: FileAccess,
    idempotency_key: str | None = None,
) -> Submission:
    """``access``: what the trials may name on this server (services.file_access)."""
    # The caller's role first, as for a job.
    project = project_for(session, caller, spec.project, Role.MEMBER, "submitting a sweep")
    root = access.project_root(project)
    trials = trials_to_check(spec)
    with trial_fields(spec):
        # Before the transaction: reading a dataset or probing S3 may take a while.
        _check_outside(session, trials, project, access, root)
    document = spec.model_dump(mode="json")
    now = utcnow()
    sweep_id = new_id()
    widest = max(trials, key=lambda t: t.resources.gpus)
    sweep = Job(
        id=sweep_id,
        project_id=project.id,
        name=spec.name,
        kind="sweep",
        status=JobStatus.QUEUED.value,
        reason=SWEEP_QUEUED_REASON,
        priority=Priority[spec.priority].value,
        gpus=spec.max_trial_gpus(),
        gpus_per_node=None,
        gpu_type=None,
        max_runtime_seconds=None,
        gpu_memory_gb=None,
        strategy="sweep",
        strategy_reason="",
        spec=document,
        spec_hash=spec_fingerprint(document),
        submitted_by=caller.subject,
        idempotency_key=idempotency_key,
        created_at=now,
        updated_at=now,
        # Its trials' folders go below it (services.sweeps.insert_trial_job).
        folder=job_folder(trials[0], project, sweep_id, root),
        parent_id=None,
    )

    def write() -> None:
        with trial_fields(spec):
            for trial in _distinct(trials, lambda t: t.resources.model_dump(mode="json")):
                check_some_cluster_can_hold(session, trial)
            for trial in _distinct(trials, wanted_secrets):
                check_secret_refs(session, project.id, project.name, wanted_secrets(trial))
            # The sweep's names: its trials' experiment, its best's model.
            check_names(session, project.id, project.name, document, claim=True)
        insert_job(session, sweep)
        sweep.project = Project(id=project.id, name=project.name)
        with trial_fields(spec):
            for trial in trials:
                check_spec_code(session, trial, used_at=now)
            check_quota_can_hold(session, project.id, widest)
        record_submission(session, sweep, actor=caller.subject)

    return commit_submission(session, caller, sweep, write)


def _check_outside(
    session: Session,
    trials: list[TrainSpec | FinetuneSpec],
    project: ProjectRef,
    access: FileAccess,
    root: str,
) -> None:
    """The checks a job's submit makes before its transaction, on each trial
    spec; an input or storage is read once however many trials name it."""
    configs: dict[str, dict[str, Any] | None] = {}
    probed: set[str | None] = set()
    for trial in trials:
        check_spec_locations(trial, project, access)
        inputs_key = _key(trial.model_dump(include={"base_model", "dataset"}, mode="json"))
        if inputs_key not in configs:
            configs[inputs_key] = check_job_inputs(trial).model_config
        if trial.checkpoint.storage not in probed:
            probed.add(trial.checkpoint.storage)
            check_checkpoint_storage(trial, root)
        strategy = strategy_for(session, trial, configs[inputs_key])
        if strategy is not None and strategy.refusal is not None:
            raise InvalidInputError(*strategy.refusal)


def trials_to_check(spec: SweepSpec) -> list[TrainSpec | FinetuneSpec]:
    """Trial specs that between them hold each value of every parameter that
    a submit checks (each with the first value of the others), the first
    with every parameter at its first value; equal specs once."""
    first = {path: parameter.points[0] for path, parameter in spec.parameters.items()}
    choices = [first]
    for path, parameter in spec.parameters.items():
        if path.startswith(_UNCHECKED_PREFIXES):
            continue
        choices.extend({**first, path: point} for point in parameter.points[1:])
    trials = [spec.trial_spec(parameters, 1) for parameters in choices]
    return _distinct(trials, lambda t: t.model_dump(mode="json"))


def _distinct(trials: list[Any], by: Any) -> list[Any]:
    seen: dict[str, Any] = {}
    for trial in trials:
        seen.setdefault(_key(by(trial)), trial)
    return list(seen.values())


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


# A trial's fields that the sweep sets for every trial, at its own top level.
_SWEEP_FIELDS = ("register_model", "project", "name")


def sweep_field(spec: SweepSpec, field: str) -> str:
    """Where a trial's ``field`` is set in the sweep's spec: the swept path
    that sets it (or a part of it), else the template's field."""
    if field.split(".")[0] in _SWEEP_FIELDS:
        return field
    for path in spec.parameters:
        if field == path or field.startswith(f"{path}.") or path.startswith(f"{field}."):
            return f"parameters.{path}"
    return f"trial.{field}"


@contextmanager
def trial_fields(spec: SweepSpec) -> Iterator[None]:
    """Re-raise a trial spec's refusal with its fields as the sweep names them."""
    try:
        yield
    except InvalidInputsError as exc:
        problems = [(sweep_field(spec, field), message) for field, message in exc.problems]
        raise InvalidInputsError(problems) from None
    except InvalidInputError as exc:
        raise InvalidInputError(sweep_field(spec, exc.field), exc.message) from None
