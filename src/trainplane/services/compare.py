"""Jobs side by side: how their specs differ, and their final metrics."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainplane.db.base import utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Cluster, Job, JobAttempt, JobTracking
from trainplane.errors import InvalidInputError
from trainplane.jobs.fields import differences
from trainplane.jobs.usage import AttemptSpan, cost, gpu_hours
from trainplane.services.access import Caller
from trainplane.services.job_refs import resolve_job_ref
from trainplane.services.jobs import load_job, merged_metrics
from trainplane.services.spec_views import visible_spec

MIN_JOBS = 2
MAX_JOBS = 20


@dataclass(frozen=True)
class ComparedJob:
    job: Job
    tracking: JobTracking | None
    final_metrics: dict[str, float]
    duration_seconds: float | None
    gpu_hours: float
    cost: float


@dataclass(frozen=True)
class Comparison:
    jobs: list[ComparedJob]
    spec_differences: dict[str, list[object]]  # dotted path -> the value in each job
    metrics: dict[str, list[float | None]]  # metric -> its final value in each job


def parse_ids(text: str) -> list[str]:
    ids = [part.strip() for part in text.split(",") if part.strip()]
    if not MIN_JOBS <= len(ids) <= MAX_JOBS:
        raise InvalidInputError(
            "ids", f"give {MIN_JOBS} to {MAX_JOBS} job ids separated by commas (got {len(ids)})"
        )
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise InvalidInputError("ids", f"job {', '.join(repeated)} is listed more than once")
    return ids


def compare_jobs(session: Session, caller: Caller, ids: list[str]) -> Comparison:
    now = utcnow()
    ids = [resolve_job_ref(session, caller, ref) for ref in ids]  # ids, prefixes or names
    with read_only(session):
        jobs = [load_job(session, caller, job_id) for job_id in ids]
        attempts: dict[str, list[tuple[JobAttempt, float]]] = {job_id: [] for job_id in ids}
        for attempt, price in session.execute(
            select(JobAttempt, Cluster.price_per_gpu_hour)
            .outerjoin(Cluster, Cluster.id == JobAttempt.cluster_id)
            .where(JobAttempt.job_id.in_(ids))
        ):
            attempts[attempt.job_id].append((attempt, price or 0.0))
        tracking = {
            row.job_id: row
            for row in session.scalars(select(JobTracking).where(JobTracking.job_id.in_(ids)))
        }
    compared = []
    for job in jobs:
        spans = [
            AttemptSpan(job.gpus, a.started_at, a.finished_at, price)
            for a, price in attempts[job.id]
        ]
        end = job.finished_at or now
        compared.append(
            ComparedJob(
                job=job,
                tracking=tracking.get(job.id),
                final_metrics=merged_metrics(a for a, _ in attempts[job.id]),
                duration_seconds=_seconds(job.started_at, end),
                gpu_hours=gpu_hours(spans, end),
                cost=cost(spans, end),
            )
        )
    names = sorted({name for c in compared for name in c.final_metrics})
    return Comparison(
        jobs=compared,
        # A viewer's comparison shows entrypoint.env names, not values.
        spec_differences=differences(
            [visible_spec(caller, job.project_id, job.spec) for job in jobs]
        ),
        metrics={name: [c.final_metrics.get(name) for c in compared] for name in names},
    )


def _seconds(start: datetime | None, end: datetime) -> float | None:
    return None if start is None else max(0.0, (end - start).total_seconds())
