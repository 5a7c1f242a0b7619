"""GPU time and cost: per job (for job lists and pages) and summed over a
time window by project, experiment, job and day (``GET /v1/usage``).

An attempt accrues GPU time from its start to its end (or to now while it
runs) at the price of the cluster it ran on. Reports clip each attempt to the
window, so a month's usage counts only that month's part of a long job.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import Exists, exists, func, or_, select
from sqlalchemy.orm import Session, aliased

from trainplane.db.base import epoch_seconds, utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Cluster, Job, JobAttempt, Project
from trainplane.errors import InvalidInputError
from trainplane.jobs.usage import AttemptSpan, cost, gpu_hours, lost_gpu_hours
from trainplane.services.access import Caller

DEFAULT_WINDOW = timedelta(days=30)
MAX_WINDOW = timedelta(days=366)
TOP_JOBS = 20


@dataclass(frozen=True)
class JobUsage:
    gpu_hours: float = 0.0
    cost: float = 0.0
    lost_gpu_hours: float = 0.0  # of gpu_hours: attempts a later one replaced


def job_usage(session: Session, job_ids: Iterable[str], now: datetime) -> dict[str, JobUsage]:
    """GPU-hours and cost so far of each of ``job_ids`` that was ever placed. Call
    inside a unit of work, after the caller's scope was checked on the jobs.
    A sweep has no attempts of its own: its usage is the sum of its trials'."""
    ids = list(job_ids)
    if not ids:
        return {}
    # Trials of any sweep among ``ids``: their usage is summed into the sweep's.
    rows = session.execute(select(Job.id, Job.parent_id).where(Job.parent_id.in_(ids)))
    trials = {trial_id: sweep_id for trial_id, sweep_id in rows}
    own = _attempt_usage(session, sorted(set(ids) | set(trials)), now)
    usage = {job_id: own[job_id] for job_id in ids if job_id in own}
    for trial_id, sweep_id in trials.items():
        if trial_id in own:
            usage[sweep_id] = _sum(usage.get(sweep_id, JobUsage()), own[trial_id])
    return usage


def _sum(a: JobUsage, b: JobUsage) -> JobUsage:
    return JobUsage(a.gpu_hours + b.gpu_hours, a.cost + b.cost, a.lost_gpu_hours + b.lost_gpu_hours)


def _attempt_usage(session: Session, ids: list[str], now: datetime) -> dict[str, JobUsage]:
    spans: dict[str, list[AttemptSpan]] = defaultdict(list)
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
        .where(JobAttempt.job_id.in_(ids))
        .order_by(JobAttempt.job_id, JobAttempt.number)
    )
    for row in rows:
        spans[row.job_id].append(
            AttemptSpan(row.gpus, row.started_at, row.finished_at, row.price_per_gpu_hour or 0.0)
        )
    return {
        job_id: JobUsage(gpu_hours(runs, now), cost(runs, now), lost_gpu_hours(runs, now))
        for job_id, runs in spans.items()
    }


@dataclass
class UsageLine:
    gpu_hours: float = 0.0
    cost: float = 0.0
    jobs: int = 0
    # Of gpu_hours: those of attempts a later attempt replaced (a restart
    # after a failure, a lost cluster or a preemption).
    lost_gpu_hours: float = 0.0

    def add(self, other: UsageLine) -> None:
        self.gpu_hours += other.gpu_hours
        self.cost += other.cost
        self.jobs += other.jobs
        self.lost_gpu_hours += other.lost_gpu_hours


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
    until = _in_range("until", until) if until else now
    since = _in_range("since", since) if since else until - DEFAULT_WINDOW
    if since >= until:
        raise InvalidInputError("since", "since must be before until")
    if until - since > MAX_WINDOW:
        raise InvalidInputError("since", f"the window may span at most {MAX_WINDOW.days} days")
    return since, until


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# What the window arithmetic (a default 30-day span, whole UTC days) and the
# databases' timestamps can hold without overflowing.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def _in_range(field: str, moment: datetime) -> datetime:
    aware = _aware(moment)
    try:
        inside = EARLIEST <= aware.astimezone(UTC) <= LATEST
    except OverflowError:  # year 1 or 9999, pushed past the calendar by its offset
        inside = False
    if not inside:
        raise InvalidInputError(
            field, f"must be between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d} (UTC)"
        )
    return aware


DAY = 86400.0


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
    # One row per attempt that overlaps the window, its times as unix seconds:
    # at 10,000s of attempts, datetime objects would cost most of the time.
    query = (
        select(
            Job.id,
            Job.name,
            Job.gpus,
            Project.name.label("project"),
            Job.spec[("tracking", "experiment")].as_string().label("experiment"),
            epoch_seconds(JobAttempt.started_at).label("start"),
            epoch_seconds(func.coalesce(JobAttempt.finished_at, now)).label("end"),
            Cluster.price_per_gpu_hour,
            _replaced().label("replaced"),
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
        rows = session.execute(query).all()

    days = _days(since, until)
    first_midnight = datetime.combine(days[0], datetime.min.time(), UTC).timestamp()
    day_hours: list[dict[str, float]] = [{} for _ in days]
    window_start, window_end = since.timestamp(), until.timestamp()
    by_job: dict[str, JobLine] = {}
    # Plain tuples: attribute access on result rows costs more than the arithmetic.
    for job_id, name, gpus, project_name, experiment, start, end, price, replaced in rows:
        start, end = max(start, window_start), min(end, window_end)
        if end <= start:
            continue
        hours = (end - start) * gpus / 3600
        line = by_job.get(job_id)
        if line is None:
            line = by_job[job_id] = JobLine(
                job_id, name, project_name, experiment or project_name, UsageLine(jobs=1)
            )
        line.usage.gpu_hours += hours
        line.usage.cost += hours * (price or 0.0)
        if replaced:
            line.usage.lost_gpu_hours += hours
        # Split the span at UTC midnights.
        index = int((start - first_midnight) // DAY)
        while start < end:
            boundary = first_midnight + (index + 1) * DAY
            per_project = day_hours[index]
            part_hours = (min(end, boundary) - start) * gpus / 3600
            per_project[project_name] = per_project.get(project_name, 0.0) + part_hours
            start, index = boundary, index + 1

    total = UsageLine()
    by_project: dict[str, UsageLine] = defaultdict(UsageLine)
    by_experiment: dict[tuple[str, str], UsageLine] = defaultdict(UsageLine)
    for line in by_job.values():
        total.add(line.usage)
        by_project[line.project].add(line.usage)
        by_experiment[(line.project, line.experiment)].add(line.usage)
    top = sorted(by_job.values(), key=lambda j: (-j.usage.gpu_hours, j.id))[:TOP_JOBS]
    return UsageReport(
        since=since,
        until=until,
        total=total,
        by_project=dict(sorted(by_project.items())),
        by_experiment=dict(sorted(by_experiment.items())),
        by_day=dict(zip(days, day_hours, strict=True)),
        top_jobs=top,
    )


def _replaced() -> Exists:
    """Whether the job has a later attempt: one index probe per attempt."""
    later = aliased(JobAttempt)
    return exists().where(later.job_id == JobAttempt.job_id, later.number > JobAttempt.number)


def _days(since: datetime, until: datetime) -> list[date]:
    first, last = since.date(), (until - timedelta(microseconds=1)).date()
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]
