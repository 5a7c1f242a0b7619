"""The wait bound from the database (:mod:`trainplane.jobs.wait_bounds` has
the rules): each queued job's first-come-first-served wait, estimated once
when the scheduler first sees it queued and kept on its row, and the bound
every ranking of the queue applies (a high quantile of the window's
estimates)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from trainplane.db.models import Job, JobAttempt
from trainplane.jobs.service_queues import ServiceRules
from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES, JobStatus
from trainplane.jobs.wait_bounds import (
    JobSizes,
    expected_left,
    fifo_wait_seconds,
    learn_sizes,
    quantile_index,
    wait_bound_seconds,
)
from trainplane.services.clusters import awaiting_placement, cluster_capacity
from trainplane.services.run_time import run_seconds

# Jobs estimated per call: a burst of submissions is taken over a few passes.
ESTIMATE_BATCH = 500
# Finished jobs the sizes are learned from, the latest first.
LEARN_FROM = 2000


def learned_sizes(session: Session, now: datetime, rules: ServiceRules) -> JobSizes:
    """What the jobs that succeeded in the bound's window held, by project."""
    since = now - timedelta(seconds=rules.fifo_wait_window_seconds)
    rows = session.execute(
        select(Job.id, Job.project_id, Job.gpus)
        .where(Job.status == JobStatus.SUCCEEDED.value, Job.finished_at >= since)
        .order_by(Job.finished_at.desc())
        .limit(LEARN_FROM)
    ).all()
    ran = run_seconds(session, [r.id for r in rows], now)
    return learn_sizes((r.project_id, ran.get(r.id, 0.0) * r.gpus) for r in rows if r.id in ran)


def estimate_fifo_waits(session: Session, now: datetime, rules: ServiceRules) -> int:
    """Estimates, for the queued jobs that have none yet, how long first
    come, first served would make them wait, and keeps it on their rows.
    Returns how many it estimated. Call inside a unit of work."""
    if rules.fifo_wait_factor <= 0:
        return 0
    fresh = session.execute(
        select(Job.id, Job.created_at)
        .where(awaiting_placement(), Job.fifo_wait_seconds.is_(None))
        .order_by(Job.created_at, Job.id)
        .limit(ESTIMATE_BATCH)
    ).all()
    if not fresh:
        return 0
    capacity = sum(c.gpus for c in cluster_capacity(session) if c.ready)
    sizes = learned_sizes(session, now, rules)
    outstanding = session.execute(
        select(Job.id, Job.project_id, Job.gpus, Job.created_at, Job.status).where(
            awaiting_placement()
            | Job.id.in_(
                select(JobAttempt.job_id).where(
                    JobAttempt.status.in_([s.value for s in LIVE_ATTEMPT_STATUSES])
                )
            )
        )
    ).all()
    ran = run_seconds(session, [r.id for r in outstanding], now)
    # Work ahead of a job: every running job's (they hold the GPUs now,
    # whenever they were submitted), then the queued jobs' submitted before it.
    left = sorted(
        (
            r.status == JobStatus.QUEUED.value,
            r.created_at,
            r.id,
            expected_left(
                sizes,
                project_id=r.project_id,
                gpus=r.gpus,
                attained_gpu_seconds=ran.get(r.id, 0.0) * r.gpus,
            ),
        )
        for r in outstanding
    )
    ahead, waits = 0.0, {}
    fresh_ids = {r.id for r in fresh}
    for _, _, job_id, work in left:
        if job_id in fresh_ids:
            waits[job_id] = fifo_wait_seconds(ahead, capacity)
        ahead += work
    for job_id, wait in waits.items():
        session.execute(
            update(Job)
            .where(Job.id == job_id, Job.fifo_wait_seconds.is_(None))
            .values(fifo_wait_seconds=wait)
        )
    return len(waits)


def wait_bound(session: Session, now: datetime, rules: ServiceRules) -> float | None:
    """The bound on any job's wait now (None: off, or nothing estimated in
    the window yet): from the rules' quantile of the estimates in the window."""
    if rules.fifo_wait_factor <= 0:
        return None
    since = now - timedelta(seconds=rules.fifo_wait_window_seconds)
    in_window = (Job.created_at >= since, Job.fifo_wait_seconds.is_not(None))
    count = session.scalar(select(func.count()).select_from(Job).where(*in_window)) or 0
    if not count:
        return None
    from_top = count - 1 - quantile_index(count, rules.fifo_wait_quantile)
    longest = session.scalar(
        select(Job.fifo_wait_seconds)
        .where(*in_window)
        .order_by(Job.fifo_wait_seconds.desc())
        .offset(from_top)
        .limit(1)
    )
    return wait_bound_seconds(longest, rules)
