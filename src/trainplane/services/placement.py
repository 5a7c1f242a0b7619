"""One placement pass: queued jobs become attempts on clusters.

Runs under the placement lock, in one transaction: read capacity and the queue,
plan (``trainplane.jobs.placement``), and for each placed job create a PENDING
attempt and move the job to STARTING. Launching the Ray jobs happens later,
outside any transaction (``trainplane.scheduler``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import exists, func, insert, select
from sqlalchemy.orm import Session

from trainplane.db.locks import placement_section, try_placement_lock
from trainplane.db.models import Job, JobAttempt
from trainplane.ids import new_id
from trainplane.jobs.attempts import StopReason
from trainplane.jobs.placement import ClusterState, Demand, plan, preemptors_first
from trainplane.jobs.quotas import QuotaLedger
from trainplane.jobs.service_queues import (
    QueuedJob,
    RankedQueue,
    ServiceRules,
    rank_queue,
    service_level,
)
from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES, AttemptStatus, JobStatus
from trainplane.services.clusters import awaiting_placement, cluster_states
from trainplane.services.quotas import project_quotas, project_shares
from trainplane.services.run_time import run_seconds
from trainplane.services.status import SCHEDULER_ACTOR, set_status_many
from trainplane.services.tracking import start_tracking
from trainplane.services.wait_bounds import wait_bound

# How long after its victims were asked to stop a preemptor keeps its first
# claim on the GPUs they free: past the grace period, plus time to notice.
EARMARK_SLACK_SECONDS = 120.0


@dataclass(frozen=True)
class PassResult:
    placed: list[tuple[str, str]]  # (job id, attempt id)
    # Seconds from submission to this placement, for jobs placed the first time.
    first_waits: list[float] = field(default_factory=list)


def queue_order() -> tuple:
    """The one definition of queue order within a project: priority, then
    submit time. Across projects, fair share reorders it
    (``trainplane.jobs.fairshare``)."""
    return (Job.priority.desc(), Job.created_at, Job.id)


def load_queue(session: Session, *, min_priority: int | None = None) -> list[Demand]:
    """The queued jobs in queue order; with ``min_priority``, only those a new
    job of that priority would wait behind."""
    query = (
        select(
            Job.id,
            Job.project_id,
            Job.gpus,
            Job.gpus_per_node,
            Job.gpu_type,
            Job.max_runtime_seconds,
            Job.gpu_memory_gb,
        )
        .where(awaiting_placement())
        .order_by(*queue_order())
    )
    if min_priority is not None:
        query = query.where(Job.priority >= min_priority)
    rows = session.execute(query)
    return [
        Demand(
            job_id=r.id,
            gpus=r.gpus,
            gpus_per_node=r.gpus_per_node,
            gpu_type=r.gpu_type,
            max_runtime_seconds=r.max_runtime_seconds,
            project_id=r.project_id,
            gpu_memory_gb=r.gpu_memory_gb,
        )
        for r in rows
    ]


def ranked_queue(
    session: Session,
    now: datetime,
    rules: ServiceRules,
    clusters: Sequence[ClusterState],
    *,
    min_priority: int | None = None,
    extra: Sequence[QueuedJob] = (),
) -> RankedQueue:
    """The queue in the order jobs are offered GPUs
    (:func:`trainplane.jobs.service_queues.rank_queue`): attained service
    and waits from the jobs' attempts, fair share from the projects' GPUs
    in use, the long runs' share from ``clusters`` (the caller's reading
    of them, so that one pass reads them once). ``extra``: jobs not in the
    database to rank as if queued."""
    demands = load_queue(session, min_priority=min_priority)
    query = select(Job.id, Job.priority, Job.created_at, Job.entry_level).where(
        awaiting_placement()
    )
    if min_priority is not None:
        query = query.where(Job.priority >= min_priority)
    facts = {r.id: r for r in session.execute(query)}
    ran = run_seconds(session, facts, now)
    queued = [
        QueuedJob(
            demand=d,
            priority=facts[d.job_id].priority,
            submitted=(facts[d.job_id].created_at - now).total_seconds(),
            attained_gpu_seconds=ran.get(d.job_id, 0.0) * d.gpus,
            waited_seconds=max(
                0.0, (now - facts[d.job_id].created_at).total_seconds() - ran.get(d.job_id, 0.0)
            ),
            entry_level=facts[d.job_id].entry_level or 0,
        )
        for d in demands
        if d.job_id in facts
    ]
    shares = project_shares(session)
    share = rules.top_share > 0
    return rank_queue(
        [*queued, *extra],
        rules,
        in_use=shares.in_use,
        weights=shares.weights,
        share_in_use_gpus=share_gpus(session, now, rules) if share else 0,
        capacity_gpus=sum(c.gpus for c in clusters if c.ready) if share else 0,
        wait_bound_seconds=wait_bound(session, now, rules),
    )


def share_gpus(session: Session, now: datetime, rules: ServiceRules) -> int:
    """The GPUs held by live attempts of jobs at the levels owed the top
    share (the starting ones too: they hold their GPUs already)."""
    rows = session.execute(
        select(Job.id, Job.gpus, Job.entry_level)
        .join(JobAttempt, JobAttempt.job_id == Job.id)
        .where(JobAttempt.status.in_([s.value for s in LIVE_ATTEMPT_STATUSES]))
    ).all()
    ran = run_seconds(session, {row.id for row in rows}, now)
    return sum(
        row.gpus
        for row in rows
        if rules.in_share(
            service_level(ran.get(row.id, 0.0) * row.gpus, rules, row.entry_level or 0)
        )
    )


def place_queued_jobs(
    session: Session,
    now: datetime,
    *,
    preemption_grace_seconds: float | None = None,
    rules: ServiceRules | None = None,
) -> PassResult:
    """``preemption_grace_seconds``: set when preemption is on, so that jobs
    that preempted others are offered the freed GPUs first. ``rules``: the
    server's attained-service settings (their defaults when None)."""
    with placement_section(), session.begin():
        if not try_placement_lock(session):
            return PassResult(placed=[])  # another scheduler is placing
        clusters = cluster_states(session, now)
        if not any(c.ready and c.free for c in clusters):
            # Nothing can start: the queue, however long, need not be read.
            return PassResult(placed=[])
        ranked = ranked_queue(session, now, rules or ServiceRules(), clusters)
        queue = ranked.order
        if preemption_grace_seconds is not None:
            queue = preemptors_first(
                queue, preemptors(session, now, grace_seconds=preemption_grace_seconds)
            )
        quotas = QuotaLedger.of(project_quotas(session, now))
        decisions = plan(queue, clusters, quotas, pinned=ranked.pinned)
        placed = _start_attempts(session, decisions.placements, clusters, now)
        waits = _first_waits(session, [job_id for job_id, _ in placed], now)
    return PassResult(placed=placed, first_waits=waits)


def preemptors(session: Session, now: datetime, *, grace_seconds: float) -> set[str]:
    """Queued jobs that asked running attempts to stop for them recently."""
    since = now - timedelta(seconds=grace_seconds + EARMARK_SLACK_SECONDS)
    return set(
        session.scalars(
            select(JobAttempt.preempted_by)
            .join(Job, Job.id == JobAttempt.preempted_by)
            .where(
                JobAttempt.stop_reason == StopReason.PREEMPTED,
                JobAttempt.stop_requested_at >= since,
                Job.status == JobStatus.QUEUED.value,
            )
            .distinct()
        )
    )


def _first_waits(session: Session, job_ids: list[str], now: datetime) -> list[float]:
    if not job_ids:
        return []
    # A job placed again (after a restart or preemption) waited since then,
    # not since its submission: only first placements count.
    placed_before = exists().where(JobAttempt.job_id == Job.id, JobAttempt.number > 1)
    rows = session.execute(select(Job.created_at).where(Job.id.in_(job_ids), ~placed_before))
    return [max(0.0, (now - created).total_seconds()) for (created,) in rows]


def _start_attempts(
    session: Session,
    placements: list[tuple[str, str]],
    clusters: list[ClusterState],
    now: datetime,
) -> list[tuple[str, str]]:
    """Jobs to STARTING and a PENDING attempt for each, in a few statements
    whatever the number of placements."""
    if not placements:
        return []
    names = {c.id: c.name for c in clusters}
    job_ids = [job_id for job_id, _ in placements]
    previous = dict(
        session.execute(
            select(JobAttempt.job_id, func.max(JobAttempt.number))
            .where(JobAttempt.job_id.in_(job_ids))
            .group_by(JobAttempt.job_id)
        ).all()
    )
    numbers = {job_id: previous.get(job_id, 0) + 1 for job_id in job_ids}
    reasons = {
        job_id: f"placed on cluster {names[cluster_id]}; launching attempt {numbers[job_id]}"
        for job_id, cluster_id in placements
    }
    # Conditional on each job still being QUEUED: a cancel may have won.
    moved = set_status_many(
        session, reasons, JobStatus.QUEUED, JobStatus.STARTING, actor=SCHEDULER_ACTOR
    )
    attempts = [
        {
            "id": new_id(),
            "job_id": job_id,
            "number": numbers[job_id],
            "cluster_id": cluster_id,
            "status": AttemptStatus.PENDING.value,
            "created_at": now,
            "reason": "",
            "log_tail": "",
        }
        for job_id, cluster_id in placements
        if job_id in moved
    ]
    if attempts:
        session.execute(insert(JobAttempt.__table__), attempts)
        # Each job's MLflow run is created by the tracking loop once it starts.
        start_tracking(session, (a["job_id"] for a in attempts), now)
    return [(a["job_id"], a["id"]) for a in attempts]
