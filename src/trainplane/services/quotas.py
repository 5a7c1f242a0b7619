"""Where projects stand against their quotas (GPUs their live attempts hold,
GPU-hours used this calendar month, UTC) and their fair share (GPUs in use
and weight)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import case, func, or_, select
from sqlalchemy.orm import Session

from trainplane.db.base import epoch_seconds
from trainplane.db.models import Job, JobAttempt, Project
from trainplane.jobs.fairshare import fair_order
from trainplane.jobs.placement import Demand
from trainplane.jobs.quotas import ProjectQuota
from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES

_LIVE = [s.value for s in LIVE_ATTEMPT_STATUSES]


def month_start(now: datetime) -> datetime:
    return datetime(now.year, now.month, 1, tzinfo=UTC)


def project_quotas(
    session: Session, now: datetime, *, project_ids: list[str] | None = None
) -> list[ProjectQuota]:
    """The projects that have a quota (or those of ``project_ids``), with
    their use. Call inside a unit of work."""
    query = select(Project.id, Project.name, Project.max_gpus, Project.gpu_hours_per_month)
    if project_ids is None:
        query = query.where(
            or_(Project.max_gpus.is_not(None), Project.gpu_hours_per_month.is_not(None))
        )
    else:
        query = query.where(Project.id.in_(project_ids))
    projects = session.execute(query).all()
    if not projects:
        return []
    ids = [p.id for p in projects]
    in_use = dict(
        session.execute(
            select(Job.project_id, func.sum(Job.gpus))
            .join(JobAttempt, JobAttempt.job_id == Job.id)
            .where(Job.project_id.in_(ids), JobAttempt.status.in_(_LIVE))
            .group_by(Job.project_id)
        ).all()
    )
    since = month_start(now)
    started = epoch_seconds(JobAttempt.started_at)
    clipped_start = case((JobAttempt.started_at < since, since.timestamp()), else_=started)
    seconds = epoch_seconds(func.coalesce(JobAttempt.finished_at, now)) - clipped_start
    used = dict(
        session.execute(
            select(Job.project_id, func.sum(seconds * Job.gpus) / 3600.0)
            .join(JobAttempt, JobAttempt.job_id == Job.id)
            .where(
                Job.project_id.in_(ids),
                JobAttempt.started_at.is_not(None),
                or_(JobAttempt.finished_at.is_(None), JobAttempt.finished_at > since),
            )
            .group_by(Job.project_id)
        ).all()
    )
    return [
        ProjectQuota(
            project_id=p.id,
            name=p.name,
            max_gpus=p.max_gpus,
            gpu_hours_per_month=p.gpu_hours_per_month,
            gpus_in_use=int(in_use.get(p.id) or 0),
            gpu_hours_this_month=max(0.0, float(used.get(p.id) or 0.0)),
        )
        for p in projects
    ]


@dataclass(frozen=True)
class Shares:
    in_use: dict[str, int]  # project id -> GPUs its live attempts hold
    weights: dict[str, float]  # project id -> weight, where it is not 1

    def order(self, queue: list[Demand]) -> list[Demand]:
        return fair_order(queue, self.in_use, self.weights)


def project_shares(session: Session) -> Shares:
    """Call inside a unit of work."""
    in_use = session.execute(
        select(Job.project_id, func.sum(Job.gpus))
        .join(JobAttempt, JobAttempt.job_id == Job.id)
        .where(JobAttempt.status.in_(_LIVE))
        .group_by(Job.project_id)
    ).all()
    weights = session.execute(select(Project.id, Project.weight).where(Project.weight != 1.0)).all()
    return Shares(
        in_use={p: int(g or 0) for p, g in in_use}, weights={p: float(w) for p, w in weights}
    )
