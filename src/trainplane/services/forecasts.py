"""What ``plan`` forecasts: when a waiting job would start, how long it would
run and what it would cost. Estimates, never promises; each says its basis.

- Start: each running attempt frees its GPUs when its progress says it will
  (the time per step so far, times the steps left) or, without progress, at
  its ``max_runtime``. The jobs ahead in the queue start in turn as GPUs
  free up and hold them for their ``max_runtime``; the job starts after them.
- Duration: from earlier runs of the same job (same project, name and GPU
  count) that succeeded: their throughput in steps per second times the
  job's ``max_steps`` when it has one, else their median duration.
- Cost: that duration, on the job's GPUs, at the cluster's price.
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainplane.db.models import Job, JobAttempt
from trainplane.jobs.placement import ClusterState, Demand, can_ever_hold
from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES, JobStatus

PAST_RUNS = 5  # the most recent similar runs a duration is taken from
_LIVE = [s.value for s in LIVE_ATTEMPT_STATUSES]


@dataclass(frozen=True)
class Release:
    cluster_id: str
    gpus: int
    after_seconds: float | None  # None: nobody can tell


@dataclass(frozen=True)
class StartForecast:
    after_seconds: float | None  # None: unknown
    basis: str


@dataclass(frozen=True)
class DurationForecast:
    seconds: float | None
    basis: str


def expected_releases(session: Session, now: datetime) -> list[Release]:
    """When each live attempt is expected to give its GPUs back. Call inside
    a unit of work."""
    rows = session.execute(
        select(
            JobAttempt.cluster_id,
            JobAttempt.started_at,
            JobAttempt.progress_step,
            JobAttempt.total_steps,
            Job.gpus,
            Job.started_at.label("job_started_at"),
            Job.max_runtime_seconds,
        )
        .join(Job, Job.id == JobAttempt.job_id)
        .where(JobAttempt.status.in_(_LIVE), JobAttempt.cluster_id.is_not(None))
    )
    releases = []
    for row in rows:
        after = None
        if row.started_at and row.progress_step and row.total_steps:
            elapsed = (now - row.started_at).total_seconds()
            per_step = elapsed / row.progress_step
            after = max(0.0, (row.total_steps - row.progress_step) * per_step)
        if row.max_runtime_seconds is not None:
            began = row.job_started_at or row.started_at or now
            limit = max(0.0, row.max_runtime_seconds - (now - began).total_seconds())
            after = limit if after is None else min(after, limit)
        releases.append(Release(row.cluster_id, row.gpus, after))
    return releases


def expected_start(
    demand: Demand,
    ahead: Sequence[Demand],
    clusters: Sequence[ClusterState],
    releases: Sequence[Release],
) -> StartForecast:
    """When ``demand`` could start behind ``ahead`` (the queued jobs before
    it, served in order), from the GPUs free now, those the running attempts
    will free, and those each job ahead frees after its ``max_runtime``.
    The earliest over the clusters that can hold it."""
    best: float | None = None
    holders = [c for c in clusters if c.ready and can_ever_hold(c, demand)]
    if not holders:
        return StartForecast(None, "unknown: no ready cluster can hold it")
    for cluster in holders:
        when = _start_on(cluster, demand, ahead, releases)
        if when is not None and (best is None or when < best):
            best = when
    if best == 0.0:
        return StartForecast(0.0, "enough GPUs are free for it and the jobs ahead")
    if best is not None:
        return StartForecast(
            best, "from the progress (or max_runtime) of the running jobs and the queue ahead"
        )
    return StartForecast(
        None,
        "unknown: a running job or one ahead reports no progress and has no max_runtime",
    )


def _start_on(
    cluster: ClusterState, demand: Demand, ahead: Sequence[Demand], releases: Sequence[Release]
) -> float | None:
    unknown = float("inf")
    pending = [
        (unknown if r.after_seconds is None else r.after_seconds, r.gpus)
        for r in releases
        if r.cluster_id == cluster.id
    ]
    heapq.heapify(pending)
    now, free = 0.0, cluster.free
    for job in [*(d for d in ahead if can_ever_hold(cluster, d)), demand]:
        while free < job.gpus:
            if not pending or pending[0][0] == unknown:
                return None
            at, gpus = heapq.heappop(pending)
            now, free = max(now, at), free + gpus
        if job is demand:
            return now
        free -= job.gpus
        ends = unknown if job.max_runtime_seconds is None else now + job.max_runtime_seconds
        heapq.heappush(pending, (ends, job.gpus))
    return None


def max_steps_of(spec: TrainSpec | FinetuneSpec) -> int | None:
    """A fine-tune's hyperparameters.max_steps; a train function's
    ``entrypoint.args.max_steps`` (or ``steps``) when it passes one."""
    if isinstance(spec, FinetuneSpec):
        return spec.hyperparameters.max_steps
    args: dict[str, Any] = spec.entrypoint.args or {}
    for key in ("max_steps", "steps"):
        value = args.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def expected_duration(
    session: Session, spec: TrainSpec | FinetuneSpec, project_id: str
) -> DurationForecast:
    """Call inside a unit of work."""
    runs = session.execute(
        select(Job.id, Job.started_at, Job.finished_at)
        .where(
            Job.project_id == project_id,
            Job.name == spec.name,
            Job.gpus == spec.resources.gpus,
            Job.status == JobStatus.SUCCEEDED.value,
            Job.started_at.is_not(None),
            Job.finished_at.is_not(None),
        )
        .order_by(Job.finished_at.desc())
        .limit(PAST_RUNS)
    ).all()
    if not runs:
        if spec.max_runtime_seconds is not None:
            return DurationForecast(None, "no earlier run of this job; at most its max_runtime")
        return DurationForecast(None, "no earlier run of this job to learn from")
    steps = max_steps_of(spec)
    if steps is not None:
        rates = _throughputs(session, [r.id for r in runs])
        if rates:
            rate = statistics.median(rates)
            return DurationForecast(
                steps / rate,
                f"{steps} steps at {rate:.3g} steps/s, the median of {len(rates)} earlier "
                f"run{'s' if len(rates) != 1 else ''} of {spec.name}",
            )
    seconds = statistics.median((r.finished_at - r.started_at).total_seconds() for r in runs)
    return DurationForecast(
        seconds,
        f"the median duration of {len(runs)} earlier run{'s' if len(runs) != 1 else ''} of "
        f"{spec.name} on {spec.resources.gpus} GPUs",
    )


def _throughputs(session: Session, job_ids: list[str]) -> list[float]:
    """Steps per second of each job's last attempt, where it reported steps."""
    rows = session.execute(
        select(
            JobAttempt.job_id,
            JobAttempt.number,
            JobAttempt.started_at,
            JobAttempt.finished_at,
            JobAttempt.progress_step,
        )
        .where(JobAttempt.job_id.in_(job_ids))
        .order_by(JobAttempt.job_id, JobAttempt.number)
    )
    last: dict[str, Any] = {}
    for row in rows:
        last[row.job_id] = row
    rates = []
    for row in last.values():
        if row.started_at and row.finished_at and row.progress_step:
            seconds = (row.finished_at - row.started_at).total_seconds()
            if seconds > 0:
                rates.append(row.progress_step / seconds)
    return rates
