"""Sweeps in the database: submitting one, inserting its trials as jobs, and
reading back what its trials did, for the search, the pruner and the API.

A sweep is a job row of kind ``sweep`` that is never placed; its trials are
ordinary jobs whose ``parent_id`` is the sweep, each with a ``sweep_trials``
row. Everything the search needs is in those rows, so it can be rebuilt from
the database alone (services.sweep_controller).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from trainplane.db.models import Job, Project, SweepTrial
from trainplane.ids import new_id
from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.jobs.states import JobStatus
from trainplane.jobs.sweep_search import TrialRecord
from trainplane.services.clusters import cluster_capacity
from trainplane.services.estimates import StrategyPlan, plan_strategy, resolved_spec_document
from trainplane.services.status import SCHEDULER_ACTOR, record_submission, set_status
from trainplane.services.submissions import insert_job, new_job, spec_fingerprint
from trainplane.storage.backends import join


def insert_trial_job(
    session: Session,
    sweep: Job,
    spec: TrainSpec | FinetuneSpec,
    *,
    number: int,
    parameters: dict[str, Any],
    decision_steps: Sequence[int],
    now: datetime,
) -> Job:
    """Trial ``number`` of ``sweep``: a QUEUED job submitted in the sweep's
    name, and its sweep_trials row, in the caller's transaction (no commit).
    The sweep's submit already checked the caller's role, names and quota."""
    strategy = _trial_strategy(session, spec)
    document = spec.model_dump(mode="json")
    fingerprint = spec_fingerprint(document)
    if strategy is not None and strategy.refusal is None:
        document = resolved_spec_document(document, strategy)
    job_id = new_id()
    job = new_job(
        spec,
        document,
        strategy,
        fingerprint=fingerprint,
        job_id=job_id,
        project_id=sweep.project_id,
        submitted_by=sweep.submitted_by,
        idempotency_key=None,
        # Below the sweep's: a sweep's checkpoints and models lie together.
        folder=join(sweep.folder, job_id) if sweep.folder else None,
        now=now,
        parent_id=sweep.id,
    )
    insert_job(session, job)
    job.project = Project(id=sweep.project_id, name=sweep.project_name)
    record_submission(
        session, job, actor=SCHEDULER_ACTOR, reason=f"trial {number} of sweep {sweep.name}"
    )
    session.execute(
        insert(SweepTrial),
        [
            {
                "job_id": job_id,
                "sweep_id": sweep.id,
                "number": number,
                "parameters": parameters,
                "decision_steps": list(decision_steps),
                "values": {},
                "search_state": {},
                "created_at": now,
            }
        ],
    )
    if strategy is not None and strategy.refusal is not None:
        # The sweep's submit checked the template; a proposed combination no
        # cluster can hold fails as a trial, not as the sweep.
        field, message = strategy.refusal
        set_status(
            session, job, JobStatus.FAILED, reason=f"{field}: {message}", actor=SCHEDULER_ACTOR
        )
    return job


def _trial_strategy(session: Session, spec: TrainSpec | FinetuneSpec) -> StrategyPlan | None:
    """The strategy plan of a trial that asks for auto or gives its model's
    size; None for the rest. No dataset or model config is read here (this
    runs in the controller's transaction): auto without model.parameters
    picks ddp."""
    if spec.strategy.type != "auto" and spec.model is None:
        return None
    return plan_strategy(spec, None, cluster_capacity(session))


def _trial_state(status: str, trial: SweepTrial) -> str:
    if status == JobStatus.SUCCEEDED:
        return "succeeded" if trial.last_value is not None else "failed"
    if status == JobStatus.CANCELLED and trial.pruned_reason is not None:
        return "pruned"
    if status in (JobStatus.FAILED, JobStatus.CANCELLED):
        return "failed"
    return "running"


def trial_records(session: Session, sweep_id: str) -> list[TrialRecord]:
    """What each trial of the sweep did, by number, as the search engine
    reads it. Call inside a unit of work."""
    rows = session.execute(
        select(SweepTrial, Job.status)
        .join(Job, Job.id == SweepTrial.job_id)
        .where(SweepTrial.sweep_id == sweep_id)
        .order_by(SweepTrial.number)
    )
    records = []
    for trial, status in rows:
        state = _trial_state(status, trial)
        records.append(
            TrialRecord(
                number=trial.number,
                parameters=dict(trial.parameters),
                state=state,  # type: ignore[arg-type]
                value=trial.last_value if state == "succeeded" else None,
                intermediate={int(step): value for step, value in (trial.values or {}).items()},
                search_state=dict(trial.search_state or {}),
            )
        )
    return records
