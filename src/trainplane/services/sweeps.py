"""Sweeps in the database: inserting their trials as jobs, reading back what
the trials did (for the search, the pruner and the API), and cancelling
them with their sweep. (Submitting one: services.sweep_submit.)

A sweep is a job row of kind ``sweep`` that is never placed; its trials are
ordinary jobs whose ``parent_id`` is the sweep, each with a ``sweep_trials``
row. Everything the search needs is in those rows, so it can be rebuilt from
the database alone (services.sweep_controller).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, insert, select, update
from sqlalchemy.orm import Session

from trainplane.db.base import utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Job, JobAttempt, Project, SweepTrial
from trainplane.errors import InvalidInputError, NotFoundError
from trainplane.ids import new_id
from trainplane.jobs import sweep_search
from trainplane.jobs.spec import FinetuneSpec, SweepSpec, TrainSpec, load_sweep_spec
from trainplane.jobs.states import (
    CANCEL_IMMEDIATELY,
    CANCEL_VIA_CLUSTER,
    TERMINAL_STATUSES,
    JobStatus,
)
from trainplane.jobs.sweep_search import TrialRecord
from trainplane.services.access import Caller
from trainplane.services.clusters import cluster_capacity
from trainplane.services.estimates import StrategyPlan, plan_strategy, resolved_spec_document
from trainplane.services.status import (
    SCHEDULER_ACTOR,
    record_submission,
    set_status,
    set_status_many,
)
from trainplane.services.submissions import insert_job, new_job, spec_fingerprint
from trainplane.services.usage import JobUsage, job_usage
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


def _trials(session: Session, sweep_id: str) -> list[Row[Any]]:
    """Each trial of the sweep with its job's columns, by number."""
    return list(
        session.execute(
            select(
                SweepTrial,
                Job.id,
                Job.name,
                Job.status,
                Job.reason,
                Job.created_at,
                Job.started_at,
                Job.finished_at,
            )
            .join(Job, Job.id == SweepTrial.job_id)
            .where(SweepTrial.sweep_id == sweep_id)
            .order_by(SweepTrial.number)
        )
    )


def _record(trial: SweepTrial, status: str) -> TrialRecord:
    state = _trial_state(status, trial)
    return TrialRecord(
        number=trial.number,
        parameters=dict(trial.parameters),
        state=state,  # type: ignore[arg-type]
        value=trial.last_value if state == "succeeded" else None,
        intermediate={int(step): value for step, value in (trial.values or {}).items()},
        search_state=dict(trial.search_state or {}),
    )


def trial_records(session: Session, sweep_id: str) -> list[TrialRecord]:
    """What each trial of the sweep did, by number, as the search engine
    reads it. Call inside a unit of work."""
    return [_record(row.SweepTrial, row.status) for row in _trials(session, sweep_id)]


@dataclass(frozen=True)
class TrialView:
    """A trial as ``GET /v1/jobs/{id}/trials`` lists it."""

    id: str
    name: str
    number: int
    status: str
    reason: str
    parameters: dict[str, Any]
    objective: str  # the metric's name
    last_value: float | None
    best_value: float | None
    step: int | None
    values: dict[str, float]  # the objective at each decision step reached
    gpu_hours: float
    cost: float
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True)
class SweepSummary:
    objective: dict[str, str]  # {metric, mode}
    # {id, name, number, parameters, objective: {metric, value}}; None until one succeeded
    best_trial: dict[str, Any] | None
    trials: dict[str, int]  # by state: running, succeeded, pruned, failed


@dataclass(frozen=True)
class TrialListing:
    items: list[TrialView]
    summary: SweepSummary


def _summary(spec: SweepSpec, rows: list[Row[Any]]) -> SweepSummary:
    records = [_record(row.SweepTrial, row.status) for row in rows]
    metric = spec.objective.metric
    best = sweep_search.best(spec, records)
    best_trial = None
    if best is not None:
        row = next(r for r in rows if r.SweepTrial.number == best.number)
        best_trial = {
            "id": row.id,
            "name": row.name,
            "number": best.number,
            "parameters": best.parameters,
            "objective": {"metric": metric, "value": best.value},
        }
    return SweepSummary(
        objective={"metric": metric, "mode": spec.objective.mode},
        best_trial=best_trial,
        trials=sweep_search.counts(records),
    )


def sweep_summary(session: Session, job: Job) -> SweepSummary | None:
    """The sweep's objective, best trial and trial counts; None for a job
    that is not a sweep. Call inside a unit of work."""
    if job.kind != "sweep":
        return None
    return _summary(load_sweep_spec(job.spec), _trials(session, job.id))


def trial_listing(session: Session, caller: Caller, sweep_id: str) -> TrialListing:
    """The sweep's trials by number, with its summary. NotFoundError for a
    job the caller cannot see; InvalidInputError for one that is not a sweep."""
    with read_only(session):
        sweep = session.scalar(select(Job).where(Job.id == sweep_id, caller.scope(Job.project_id)))
        if sweep is None:
            raise NotFoundError(f"no job with id '{sweep_id}'")
        if sweep.kind != "sweep":
            raise InvalidInputError("id", f"job {sweep_id} is a {sweep.kind} job, not a sweep")
        spec = load_sweep_spec(sweep.spec)
        rows = _trials(session, sweep_id)
        usage = job_usage(session, [row.id for row in rows], utcnow())
    metric = spec.objective.metric
    items = []
    for row in rows:
        trial, spent = row.SweepTrial, usage.get(row.id) or JobUsage()
        items.append(
            TrialView(
                id=row.id,
                name=row.name,
                number=trial.number,
                status=row.status,
                reason=row.reason,
                parameters=dict(trial.parameters),
                objective=metric,
                last_value=trial.last_value,
                best_value=trial.best_value,
                step=trial.last_step,
                values=dict(trial.values or {}),
                gpu_hours=round(spent.gpu_hours, 6),
                cost=round(spent.cost, 6),
                created_at=row.created_at,
                started_at=row.started_at,
                finished_at=row.finished_at,
            )
        )
    return TrialListing(items, _summary(spec, rows))


def stop_trials(session: Session, sweep: Job, *, actor: str) -> bool:
    """Cancel the sweep's trials not yet ended, as a user's cancel of each
    would: those with no live attempt at once, the others through CANCELLING
    (their attempts due for a look now). Idempotent; in the caller's
    transaction. True if any trial had not ended."""
    open_trials = session.execute(
        select(Job.id, Job.status).where(
            Job.parent_id == sweep.id,
            Job.status.not_in([s.value for s in TERMINAL_STATUSES]),
        )
    ).all()
    reason = f"cancelled with sweep {sweep.name}"
    for status in CANCEL_IMMEDIATELY:
        ids = dict.fromkeys((r.id for r in open_trials if r.status == status), reason)
        set_status_many(session, ids, status, JobStatus.CANCELLED, actor=actor)
    stopping: set[str] = set()
    for status in CANCEL_VIA_CLUSTER:
        ids = dict.fromkeys(
            (r.id for r in open_trials if r.status == status), f"{reason}; stopping the attempt"
        )
        stopping |= set_status_many(session, ids, status, JobStatus.CANCELLING, actor=actor)
    if stopping:
        session.execute(
            update(JobAttempt)
            .where(JobAttempt.job_id.in_(sorted(stopping)), JobAttempt.lease_token.is_(None))
            .values(lease_expires_at=None)
        )
    return bool(open_trials)


def cancel_sweep(session: Session, sweep: Job, *, actor: str) -> None:
    """A user's cancel of a sweep, in the caller's transaction with the sweep
    locked: a QUEUED sweep ends at once; a RUNNING one goes CANCELLING until
    its trials have ended (the controller then ends it); its open trials are
    cancelled now, in the same transaction."""
    status = JobStatus(sweep.status)
    if status is JobStatus.QUEUED:
        set_status(session, sweep, JobStatus.CANCELLED, reason=f"cancelled by {actor}", actor=actor)
    elif status is JobStatus.RUNNING:
        set_status(
            session,
            sweep,
            JobStatus.CANCELLING,
            reason=f"cancel requested by {actor}; cancelling its trials",
            actor=actor,
        )
    stop_trials(session, sweep, actor=actor)
