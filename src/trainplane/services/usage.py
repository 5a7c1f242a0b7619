"""GPU time and cost: per job (for job lists and pages) and summed over a
time window by project, experiment, job and day (``GET /v1/usage``).

An attempt accrues GPU time from its start to its end (or to now while it
runs) at the price of the cluster it ran on. Reports clip each attempt to the
window, so a month's usage counts only that month's part of a long job.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from trainplane.db.base import utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Cluster, Job, JobAttempt, Project
from trainplane.errors import InvalidInputError
from trainplane.jobs.usage import AttemptSpan
from trainplane.services.access import Caller

DEFAULT_WINDOW = timedelta(days=30)
MAX_WINDOW = timedelta(days=366)
TOP_JOBS = 20


@dataclass(frozen=True)
class JobUsage:
    gpu_hours: float = 0.0
    cost: float = 0.0


def job_usage(session: Session, job_ids: Iterable[str], now: datetime) -> dict[str, JobUsage]:
    """GPU-hours and cost so far of each of ``job_ids`` that ever ran. Call
    inside a unit of work, after the caller's scope was checked on the jobs."""
    ids = list(job_ids)
    if not ids:
        return {}
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    rows = session.execute(
        select(
            JobAttempt.job_id,
            Job.gpus,
            JobAttempt.started_at,
            JobAttempt.finished_at,
            Cluster.price_per_gpu_hour,
        )
        .join(Job, Job.id == JobAttempt.job_id)
        .outerjoin(Cluster, Cluster.id == JobAttempt.cluster_id)
        .where(JobAttempt.job_id.in_(ids), JobAttempt.started_at.is_not(None))
    )
    for row in rows:
        span = AttemptSpan(row.gpus, row.started_at, row.finished_at)
        hours = span.gpu_hours(now)
        totals[row.job_id][0] += hours
        totals[row.job_id][1] += hours * (row.price_per_gpu_hour or 0.0)
    return {job_id: JobUsage(hours, cost) for job_id, (hours, cost) in totals.items()}


@dataclass
class UsageLine:
    gpu_hours: float = 0.0
    cost: float = 0.0
    jobs: set[str] = field(default_factory=set)

    def add(self, job_id: str, hours: float, price: float) -> None:
        self.gpu_hours += hours
        self.cost += hours * price
        self.jobs.add(job_id)


@dataclass(frozen=True)
class JobLine:
    id: str
    name: str
    project: str
    experiment: str
    usage: UsageLine


@dataclass(frozen=True)
class UsageReport:
    since: datetime
    until: datetime
    total: UsageLine
    by_project: dict[str, UsageLine]
    by_experiment: dict[tuple[str, str], UsageLine]  # (project, experiment)
    by_day: dict[date, dict[str, float]]  # day -> project -> GPU-hours, every day of the window
    top_jobs: list[JobLine]  # the most GPU-hours first, at most TOP_JOBS


def window(
    since: datetime | None, until: datetime | None, now: datetime
) -> tuple[datetime, datetime]:
    until = _aware(until) if until else now
    since = _aware(since) if since else until - DEFAULT_WINDOW
    if since >= until:
        raise InvalidInputError("since", "since must be before until")
    if until - since > MAX_WINDOW:
        raise InvalidInputError("since", f"the window may span at most {MAX_WINDOW.days} days")
    return since, until


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def usage_report(
    session: Session,
    caller: Caller,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    project: str | None = None,
) -> UsageReport:
    now = utcnow()
    since, until = window(since, until, now)
    experiment = Job.spec[("tracking", "experiment")].as_string()
    query = (
        select(
            Job.id,
            Job.name,
            Job.gpus,
            Project.name.label("project"),
            experiment.label("experiment"),
            JobAttempt.started_at,
            JobAttempt.finished_at,
            Cluster.price_per_gpu_hour,
        )
        .join(Job, Job.id == JobAttempt.job_id)
        .join(Project, Project.id == Job.project_id)
        .outerjoin(Cluster, Cluster.id == JobAttempt.cluster_id)
        .where(
            caller.scope(Job.project_id),
            JobAttempt.started_at.is_not(None),
            JobAttempt.started_at < until,
            or_(JobAttempt.finished_at.is_(None), JobAttempt.finished_at > since),
        )
    )
    if project:
        query = query.where(Project.name == project)
    with read_only(session):
        rows = list(session.execute(query))

    total = UsageLine()
    by_project: dict[str, UsageLine] = defaultdict(UsageLine)
    by_experiment: dict[tuple[str, str], UsageLine] = defaultdict(UsageLine)
    by_job: dict[str, JobLine] = {}
    days = _days(since, until)
    by_day: dict[date, dict[str, float]] = {day: {} for day in days}
    for row in rows:
        start = max(row.started_at, since)
        end = min(row.finished_at or now, until)
        if end <= start:
            continue
        price = row.price_per_gpu_hour or 0.0
        hours = (end - start).total_seconds() * row.gpus / 3600
        experiment_name = row.experiment or row.project
        total.add(row.id, hours, price)
        by_project[row.project].add(row.id, hours, price)
        by_experiment[(row.project, experiment_name)].add(row.id, hours, price)
        line = by_job.setdefault(
            row.id, JobLine(row.id, row.name, row.project, experiment_name, UsageLine())
        )
        line.usage.add(row.id, hours, price)
        for day, part in _split_by_day(start, end):
            per_project = by_day[day]
            per_project[row.project] = per_project.get(row.project, 0.0) + (part * row.gpus / 3600)
    top = sorted(by_job.values(), key=lambda j: (-j.usage.gpu_hours, j.id))[:TOP_JOBS]
    return UsageReport(
        since=since,
        until=until,
        total=total,
        by_project=dict(sorted(by_project.items())),
        by_experiment=dict(sorted(by_experiment.items())),
        by_day=by_day,
        top_jobs=top,
    )


def _days(since: datetime, until: datetime) -> list[date]:
    first, last = since.date(), (until - timedelta(microseconds=1)).date()
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def _split_by_day(start: datetime, end: datetime) -> Iterable[tuple[date, float]]:
    """The seconds of [start, end) that fall on each UTC day."""
    while start < end:
        midnight = datetime.combine(start.date() + timedelta(days=1), datetime.min.time(), UTC)
        part_end = min(end, midnight)
        yield start.date(), (part_end - start).total_seconds()
        start = part_end
