"""The MLflow tracking state of jobs (``job_tracking``).

A job's row is created when the job is first placed. The tracking loop claims
due rows under a lease (``services.leases``), writes to MLflow with no
transaction open, and applies what it achieved only while its token still holds. The metric
points stay in ``job_metrics`` until the run has them: that table is the
buffer that keeps them while MLflow is away.

A sweep's row (made when the sweep starts) tracks the parent run of its
trials' runs: a pass over it reads the best trial so far and, once the sweep
has ended, where the best trial's exported model is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from trainplane.db.models import (
    Cluster,
    Job,
    JobAttempt,
    JobEvent,
    JobMetric,
    JobTracking,
    SweepTrial,
)
from trainplane.jobs.spec import load_spec, load_sweep_spec
from trainplane.jobs.states import TERMINAL_STATUSES, JobStatus
from trainplane.jobs.sweep_search import best, counts
from trainplane.services.leases import claim_due
from trainplane.services.locations import model_root
from trainplane.services.names import EXPERIMENT, MODEL, names_of, owner_ids
from trainplane.services.sweeps import trial_records
from trainplane.services.usage import JobUsage, job_usage
from trainplane.tracking.run_data import AttemptFacts, experiment_name
from trainplane.tracking.sweep_run import SweepFacts


@dataclass(frozen=True)
class PointFacts:
    id: int
    step: int
    recorded_at: datetime
    values: dict[str, float]


@dataclass(frozen=True)
class EventFacts:
    created_at: datetime
    from_status: str | None
    to_status: str
    reason: str
    actor: str


@dataclass(frozen=True)
class TrackingWork:
    """What one tracking pass over one job needs, read when it was claimed."""

    job_id: str
    lease_token: str
    name: str
    project: str
    kind: str
    status: JobStatus
    submitted_by: str
    spec: dict[str, Any]
    created_at: datetime
    finished_at: datetime | None
    experiment_id: str | None
    run_id: str | None
    synced_attempts: str
    model_version: str | None
    model_root: str
    attempts: list[AttemptFacts]
    points: list[PointFacts]  # after the run's last one, oldest first
    more_points: bool  # beyond this pass's batch
    events: list[EventFacts]  # only for an ended job whose points are all loaded
    project_id: str = ""
    # The projects the job's experiment and model belong to (services.names
    # owner_ids); None: no one's yet. The loop writes only to its project's own.
    experiment_owner: str | None = None
    model_owner: str | None = None
    # A trial's sweep, and the sweep's run once it has one (its run's parent).
    parent_id: str | None = None
    parent_run_id: str | None = None
    # Whether the sweep's tracking ended with no run: the trial's run has no parent to have.
    parent_gave_up: bool = False
    sweep: SweepFacts | None = None  # for a sweep

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def can_finish(self) -> bool:
        return self.ended and not self.more_points


@dataclass
class SyncResult:
    """What a pass achieved (None: unchanged), and the error that stopped it."""

    experiment_id: str | None = None
    run_id: str | None = None
    run_url: str | None = None
    synced_metric_id: int | None = None
    synced_attempts: str | None = None
    model_name: str | None = None
    model_version: str | None = None
    finished: bool = False
    error: str | None = None
    notes: list[str] = field(default_factory=list)


# --- creating ---------------------------------------------------------------------


def start_tracking(session: Session, job_ids: Iterable[str], now: datetime) -> None:
    """Rows for jobs placed for the first time, in the placing transaction
    (jobs placed again keep theirs)."""
    wanted = set(job_ids)
    if not wanted:
        return
    existing = set(
        session.scalars(select(JobTracking.job_id).where(JobTracking.job_id.in_(wanted)))
    )
    rows = [
        {
            "job_id": job_id,
            "synced_metric_id": 0,
            "synced_attempts": "",
            "failures": 0,
            "created_at": now,
        }
        for job_id in sorted(wanted - existing)
    ]
    if rows:
        session.execute(insert(JobTracking.__table__), rows)


# --- claiming ---------------------------------------------------------------------


def claim_tracking(
    session: Session,
    now: datetime,
    *,
    lease_seconds: float,
    limit: int,
    points_per_pass: int,
    default_storage: str,
) -> list[TrackingWork]:
    with session.begin():
        token, ids = claim_due(
            session,
            JobTracking.job_id,
            JobTracking.finished_at.is_(None),
            now,
            lease_seconds=lease_seconds,
            limit=limit,
        )
        if not ids:
            return []
        rows = session.execute(
            select(JobTracking, Job)
            .join(Job, Job.id == JobTracking.job_id)
            .where(JobTracking.job_id.in_(ids))
        ).all()
        attempts = _attempts(session, ids)
        uses = {job.id: names_of(job.spec, job.project_name) for _, job in rows}
        owners = owner_ids(session, [use for found in uses.values() for use in found])
        parents = _parent_runs(session, {job.parent_id for _, job in rows if job.parent_id})
        works = []
        for tracking, job in rows:
            named = {use.kind: owners.get(use) for use in uses[job.id]}
            points, more = _points(session, job.id, tracking.synced_metric_id, points_per_pass)
            status = JobStatus(job.status)
            finishing = status in TERMINAL_STATUSES and not more
            sweep = (
                _sweep_facts(session, job, default_storage, now) if job.kind == "sweep" else None
            )
            parent_run, parent_gave_up = parents.get(job.parent_id or "", (None, False))
            works.append(
                TrackingWork(
                    job_id=job.id,
                    lease_token=token,
                    name=job.name,
                    project=job.project_name,
                    kind=job.kind,
                    status=status,
                    submitted_by=job.submitted_by,
                    spec=job.spec,
                    created_at=job.created_at,
                    finished_at=job.finished_at,
                    experiment_id=tracking.experiment_id,
                    run_id=tracking.run_id,
                    synced_attempts=tracking.synced_attempts,
                    model_version=tracking.model_version,
                    model_root=(
                        (sweep.best_model_root or "")
                        if sweep is not None
                        else _model_root(job, default_storage)
                    ),
                    attempts=attempts.get(job.id, []),
                    points=points,
                    more_points=more,
                    events=_events(session, job.id) if finishing else [],
                    project_id=job.project_id,
                    experiment_owner=named.get(EXPERIMENT),
                    model_owner=named.get(MODEL),
                    parent_id=job.parent_id,
                    parent_run_id=parent_run,
                    parent_gave_up=parent_gave_up,
                    sweep=sweep,
                )
            )
        return works


def _model_root(job: Job, default_storage: str) -> str:
    return model_root(job.folder, load_spec(job.spec), job.project_name, job.id, default_storage)


def _parent_runs(session: Session, sweep_ids: set[str]) -> dict[str, tuple[str | None, bool]]:
    """Each sweep's run id (None: not made yet), and whether its tracking
    ended without one (a sweep not tracked at all counts as that too)."""
    if not sweep_ids:
        return {}
    rows = session.execute(
        select(JobTracking.job_id, JobTracking.run_id, JobTracking.finished_at).where(
            JobTracking.job_id.in_(sorted(sweep_ids))
        )
    )
    found = {
        job_id: (run_id, run_id is None and ended is not None) for job_id, run_id, ended in rows
    }
    return {sweep_id: found.get(sweep_id, (None, True)) for sweep_id in sweep_ids}


def _sweep_facts(session: Session, sweep: Job, default_storage: str, now: datetime) -> SweepFacts:
    """The sweep's trials so far and its best (as ``sweep_search.best`` picks
    it for the API), with where the best trial's exported model is."""
    spec = load_sweep_spec(sweep.spec)
    records = trial_records(session, sweep.id)
    top = best(spec, records)
    usage = job_usage(session, [sweep.id], now).get(sweep.id, JobUsage())
    facts = SweepFacts(
        metric=spec.objective.metric,
        counts=counts(records),
        gpu_hours=usage.gpu_hours,
        cost=usage.cost,
        lost_gpu_hours=usage.lost_gpu_hours,
        settled=len(records) >= spec.planned_trials and all(r.state != "running" for r in records),
    )
    if top is None:
        return facts
    trial = session.scalars(
        select(Job)
        .join(SweepTrial, SweepTrial.job_id == Job.id)
        .where(SweepTrial.sweep_id == sweep.id, SweepTrial.number == top.number)
    ).one()
    return dataclasses.replace(
        facts,
        best_trial_id=trial.id,
        best_trial_name=trial.name,
        best_value=top.value,
        best_model_root=_model_root(trial, default_storage),
    )


def _attempts(session: Session, job_ids: list[str]) -> dict[str, list[AttemptFacts]]:
    found: dict[str, list[AttemptFacts]] = {}
    rows = session.execute(
        select(JobAttempt, Job.gpus, Cluster.name, Cluster.accelerator, Cluster.price_per_gpu_hour)
        .join(Job, Job.id == JobAttempt.job_id)
        .outerjoin(Cluster, Cluster.id == JobAttempt.cluster_id)
        .where(JobAttempt.job_id.in_(job_ids))
        .order_by(JobAttempt.job_id, JobAttempt.number)
    )
    for attempt, gpus, cluster, accelerator, price in rows:
        found.setdefault(attempt.job_id, []).append(
            AttemptFacts(
                number=attempt.number,
                id=attempt.id,
                status=attempt.status,
                cluster=cluster,
                accelerator=accelerator or "cpu",
                gpus=gpus,
                price_per_gpu_hour=price or 0.0,
                created_at=attempt.created_at,
                started_at=attempt.started_at,
                finished_at=attempt.finished_at,
                reason=attempt.reason,
            )
        )
    return found


def _points(session: Session, job_id: str, after: int, limit: int) -> tuple[list[PointFacts], bool]:
    rows = list(
        session.execute(
            select(JobMetric.id, JobMetric.step, JobMetric.recorded_at, JobMetric.values)
            .where(JobMetric.job_id == job_id, JobMetric.id > after)
            .order_by(JobMetric.id)
            .limit(limit + 1)
        )
    )
    points = [PointFacts(r.id, r.step, r.recorded_at, r.values) for r in rows[:limit]]
    return points, len(rows) > limit


def _events(session: Session, job_id: str) -> list[EventFacts]:
    return [
        EventFacts(e.created_at, e.from_status, e.to_status, e.reason, e.actor)
        for e in session.scalars(
            select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)
        )
    ]


# --- applying ---------------------------------------------------------------------


def apply_sync(
    session: Session,
    work: TrackingWork,
    result: SyncResult,
    now: datetime,
    *,
    interval_seconds: float,
    max_backoff_seconds: float = 300.0,
) -> bool:
    """Record what the pass achieved, if the lease still holds (False if not).
    After a failure the row is due again after a doubling backoff."""
    with session.begin():
        row = session.scalar(
            select(JobTracking)
            .where(JobTracking.job_id == work.job_id, JobTracking.lease_token == work.lease_token)
            .with_for_update()
        )
        if row is None:
            return False
        for name in (
            "experiment_id",
            "run_id",
            "run_url",
            "synced_metric_id",
            "synced_attempts",
            "model_name",
            "model_version",
        ):
            value = getattr(result, name)
            if value is not None:
                setattr(row, name, value)
        if result.error is not None:
            row.error, row.error_at = result.error, now
            row.failures += 1
            delay = min(max_backoff_seconds, interval_seconds * 2 ** min(row.failures, 20))
        else:
            row.error, row.error_at = None, None
            row.failures = 0
            # A backlog of points is worked off pass after pass, not one a tick.
            delay = 0.0 if work.more_points else interval_seconds
        if result.finished:
            row.finished_at = now
        row.lease_token = None
        row.lease_expires_at = now + timedelta(seconds=delay)
        return True


def renew_lease(session: Session, work: TrackingWork, until: datetime) -> bool:
    """Extend the lease ``work`` was claimed with; False if it is not held any more."""
    with session.begin():
        renewed = session.execute(
            update(JobTracking)
            .where(JobTracking.job_id == work.job_id, JobTracking.lease_token == work.lease_token)
            .values(lease_expires_at=until)
            .execution_options(synchronize_session=False)
        )
        return renewed.rowcount == 1


# --- what the API shows -----------------------------------------------------------

DISABLED = "disabled"
NOT_STARTED = "not_started"  # the job has not been placed (or ended before it was)
PENDING = "pending"  # placed; its run is not created yet
ACTIVE = "active"  # the run exists and is being written to
FINISHED = "finished"  # the run is closed: every point in it, the model registered


@dataclass(frozen=True)
class TrackingView:
    status: str
    experiment: str
    experiment_id: str | None = None
    run_id: str | None = None
    run_url: str | None = None
    error: str | None = None
    error_at: datetime | None = None
    model_name: str | None = None
    model_version: str | None = None


def tracking_view(
    row: JobTracking | None, spec: dict[str, Any], project: str, *, enabled: bool
) -> TrackingView:
    experiment = experiment_name(spec, project)
    if row is None:
        return TrackingView(status=DISABLED if not enabled else NOT_STARTED, experiment=experiment)
    if row.finished_at is not None:
        status = FINISHED
    elif not enabled:
        status = DISABLED
    else:
        status = ACTIVE if row.run_id else PENDING
    return TrackingView(
        status=status,
        experiment=experiment,
        experiment_id=row.experiment_id,
        run_id=row.run_id,
        run_url=row.run_url,
        error=row.error,
        error_at=row.error_at,
        model_name=row.model_name,
        model_version=row.model_version,
    )


def load_tracking(session: Session, job_id: str) -> JobTracking | None:
    return session.get(JobTracking, job_id)
