"""How long jobs have run, from their attempts."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainplane.db.models import JobAttempt


def run_seconds(session: Session, job_ids: Collection[str], now: datetime) -> dict[str, float]:
    """Seconds each job's attempts have run, all attempts together (a live
    one until ``now``); jobs that never ran are left out."""
    if not job_ids:
        return {}
    rows = session.execute(
        select(JobAttempt.job_id, JobAttempt.started_at, JobAttempt.finished_at).where(
            JobAttempt.job_id.in_(list(job_ids)), JobAttempt.started_at.is_not(None)
        )
    )
    ran: dict[str, float] = {}
    for job_id, started, finished in rows:
        seconds = max(0.0, ((finished or now) - started).total_seconds())
        ran[job_id] = ran.get(job_id, 0.0) + seconds
    return ran
