"""Submitting, reading, listing and cancelling jobs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, select, tuple_, update
from sqlalchemy.orm import Session

from trainplane import wakeup
from trainplane.db.base import utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Cluster, Job, JobAttempt, JobEvent, JobTracking, Project
from trainplane.errors import ConflictError, InvalidInputError, NotFoundError
from trainplane.ids import new_id
from trainplane.jobs.entrypoints import wanted_secrets
from trainplane.jobs.environment import redacted_spec
from trainplane.jobs.service_queues import ServiceRules
from trainplane.jobs.spec import FinetuneSpec, SweepSpec, TrainSpec
from trainplane.jobs.states import (
    CANCEL_IMMEDIATELY,
    CANCEL_VIA_CLUSTER,
    TERMINAL_STATUSES,
    JobStatus,
)
from trainplane.services.access import Caller, Role
from trainplane.services.bundles import check_spec_code
from trainplane.services.estimates import resolved_spec_document
from trainplane.services.file_access import FileAccess, check_spec_locations, job_folder
from trainplane.services.job_inputs import check_job_inputs
from trainplane.services.names import check_names
from trainplane.services.pagination import decode_cursor, encode_cursor
from trainplane.services.projects import project_for
from trainplane.services.queue import QueueView, queue_views
from trainplane.services.secrets import check_secret_refs
from trainplane.services.spec_views import sees_env_values
from trainplane.services.status import record_note, record_submission, set_status
from trainplane.services.storage_access import check_checkpoint_storage
from trainplane.services.submissions import (
    Submission,
    check_quota_can_hold,
    check_some_cluster_can_hold,
    commit_submission,
    insert_job,
    new_job,
    spec_fingerprint,
    strategy_for,
)
from trainplane.services.sweep_submit import submit_sweep
from trainplane.services.sweeps import SweepSummary, cancel_sweep, sweep_summary
from trainplane.services.sweeps import insert_trial_job as insert_trial_job  # trials are jobs
from trainplane.services.usage import JobUsage, job_usage


def submit_job(
    session: Session,
    caller: Caller,
    spec: TrainSpec | FinetuneSpec | SweepSpec,
    *,
    access: FileAccess,
    idempotency_key: str | None = None,
) -> Submission:
    """``access``: what the spec may name on this server (services.file_access)."""
    if isinstance(spec, SweepSpec):
        return submit_sweep(session, caller, spec, access=access, idempotency_key=idempotency_key)
    # The caller's role first: nothing is read or probed for someone who may
    # not submit to the project.
    project = project_for(session, caller, spec.project, Role.MEMBER, "submitting a job")
    root = access.project_root(project)
    check_spec_locations(spec, project, access)
    # Before the transaction: reading a dataset or probing S3 may take a while.
    inputs = check_job_inputs(spec)
    check_checkpoint_storage(spec, root)
    document = spec.model_dump(mode="json")
    # Replays are recognised by the spec as sent, before auto is resolved.
    fingerprint = spec_fingerprint(document)
    strategy = strategy_for(session, spec, inputs.model_config)
    if strategy is not None:
        if strategy.refusal is not None:
            raise InvalidInputError(*strategy.refusal)
        document = resolved_spec_document(document, strategy)
    now = utcnow()
    job_id = new_id()
    job = new_job(
        spec,
        document,
        strategy,
        fingerprint=fingerprint,
        job_id=job_id,
        project_id=project.id,
        submitted_by=caller.subject,
        idempotency_key=idempotency_key,
        folder=job_folder(spec, project, job_id, root),
        now=now,
    )

    def write() -> None:
        check_some_cluster_can_hold(session, spec)
        # In the job's transaction: a name claimed by a concurrent submit of
        # another project, or a secret deleted meanwhile, refuses it.
        check_names(session, project.id, project.name, document, claim=True)
        check_secret_refs(session, project.id, project.name, wanted_secrets(spec))
        insert_job(session, job)
        job.project = Project(id=project.id, name=project.name)
        check_spec_code(session, spec, used_at=now)
        check_quota_can_hold(session, project.id, spec)
        record_submission(session, job, actor=caller.subject)
        if job.strategy_reason:
            record_note(
                session,
                job.id,
                JobStatus.QUEUED,
                reason=f"strategy auto: {job.strategy_reason}",
                actor=caller.subject,
            )

    return commit_submission(session, caller, job, write)


def load_job(session: Session, caller: Caller, job_id: str, *, for_update: bool = False) -> Job:
    query = select(Job).where(Job.id == job_id, caller.scope(Job.project_id))
    if for_update:
        query = query.with_for_update(of=Job)
    job = session.scalar(query)
    if job is None:
        raise NotFoundError(f"no job with id '{job_id}'")
    return job


@dataclass(frozen=True)
class AttemptRow:
    attempt: JobAttempt
    cluster_name: str | None


@dataclass(frozen=True)
class JobDetail:
    job: Job
    attempts: list[AttemptRow]
    queue: QueueView | None  # for QUEUED jobs: position and why it waits
    tracking: JobTracking | None = None  # its MLflow run, once it was placed
    usage: JobUsage | None = None  # GPU time and cost so far
    env_hidden: bool = False  # the caller is a viewer: entrypoint.env values are hidden
    sweep: SweepSummary | None = None  # for a sweep: its best trial and trial counts

    @property
    def spec(self) -> dict[str, Any]:
        """The job's spec as the caller may see it (services.spec_views)."""
        return redacted_spec(self.job.spec) if self.env_hidden else self.job.spec

    @property
    def latest_metrics(self) -> dict[str, float]:
        """The last reported value of each metric, over all attempts."""
        return merged_metrics(row.attempt for row in self.attempts)


def merged_metrics(attempts: Iterable[JobAttempt]) -> dict[str, float]:
    """Attempts' latest metrics merged in attempt order: a later attempt's
    value wins, a metric only an earlier attempt reported is kept."""
    merged: dict[str, float] = {}
    for attempt in sorted(attempts, key=lambda a: a.number):
        merged.update(attempt.latest_metrics or {})
    return merged


def get_job(
    session: Session, caller: Caller, job_id: str, *, rules: ServiceRules | None = None
) -> JobDetail:
    """``rules``: the scheduler's (``Settings.service_rules``), which rank the queue
    position; their defaults when None."""
    with read_only(session):
        job = load_job(session, caller, job_id)
        attempts = [
            AttemptRow(attempt, cluster_name)
            for attempt, cluster_name in session.execute(
                select(JobAttempt, Cluster.name)
                .outerjoin(Cluster, Cluster.id == JobAttempt.cluster_id)
                .where(JobAttempt.job_id == job_id)
                .order_by(JobAttempt.number)
            )
        ]
        tracking = session.get(JobTracking, job_id)
        usage = job_usage(session, [job_id], utcnow()).get(job_id)
        queue = queue_views(session, [job], rules).get(job.id)
        hidden = not sees_env_values(caller, job.project_id)
        sweep = sweep_summary(session, job)
        return JobDetail(job, attempts, queue, tracking, usage, env_hidden=hidden, sweep=sweep)


@dataclass(frozen=True)
class JobFilter:
    statuses: Sequence[JobStatus] = ()
    project: str | None = None
    name: str | None = None
    parent: str | None = None  # a sweep's id: its trials


# What a job list shows: plain rows, no ORM objects and no spec document, because
# list pages are the most frequent read.
SUMMARY_COLUMNS = (
    Job.id,
    Job.project_id,
    Job.name,
    Project.name.label("project_name"),
    Job.kind,
    Job.status,
    Job.reason,
    Job.priority,
    Job.gpus,
    Job.gpus_per_node,
    Job.gpu_type,
    Job.gpu_memory_gb,
    Job.strategy,
    Job.submitted_by,
    Job.created_at,
    Job.updated_at,
    Job.started_at,
    Job.finished_at,
    Job.parent_id,
)


@dataclass(frozen=True)
class Page:
    items: list[Row[Any]]  # SUMMARY_COLUMNS
    next_cursor: str | None
    queue: dict[str, QueueView]
    usage: dict[str, JobUsage]


def list_jobs(
    session: Session,
    caller: Caller,
    filters: JobFilter,
    *,
    limit: int,
    cursor: str | None,
    rules: ServiceRules | None = None,
) -> Page:
    query = (
        select(*SUMMARY_COLUMNS)
        .join(Project, Project.id == Job.project_id)
        .where(caller.scope(Job.project_id))
    )
    if filters.project:
        # A subquery, not a filter on the joined name: with the id known up
        # front the planner walks the (project_id, ..., created_at, id) index in
        # page order instead of sorting every match.
        project_id = select(Project.id).where(Project.name == filters.project)
        query = query.where(Job.project_id == project_id.scalar_subquery())
    if filters.statuses:
        query = query.where(Job.status.in_([s.value for s in filters.statuses]))
    if filters.name:
        query = query.where(Job.name == filters.name)
    if filters.parent:
        query = query.where(Job.parent_id == filters.parent)
    if cursor:
        created_at, job_id = decode_cursor(cursor)
        query = query.where(tuple_(Job.created_at, Job.id) < tuple_(created_at, job_id))
    query = query.order_by(Job.created_at.desc(), Job.id.desc()).limit(limit + 1)
    with read_only(session):
        rows = list(session.execute(query))
        more = len(rows) > limit
        rows = rows[:limit]
        queue = queue_views(session, rows, rules)
        usage = job_usage(session, (r.id for r in rows), utcnow())
    next_cursor = encode_cursor(rows[-1].created_at, rows[-1].id) if more else None
    return Page(rows, next_cursor, queue, usage)


def cancel_job(session: Session, caller: Caller, job_id: str) -> JobDetail:
    """QUEUED and RESTARTING jobs end at once; live attempts go through
    CANCELLING until the cluster confirms; a repeated cancel changes nothing.
    A sweep's open trials are cancelled with it, in the same transaction."""
    with session.begin():
        job = load_job(session, caller, job_id, for_update=True)
        caller.require(job.project_id, Role.MEMBER, "cancelling a job")
        status = JobStatus(job.status)
        if status in TERMINAL_STATUSES:
            raise ConflictError(f"job {job_id} already ended as {status}; nothing to cancel")
        if job.kind == "sweep":
            cancel_sweep(session, job, actor=caller.subject)
        elif status in CANCEL_IMMEDIATELY:
            set_status(
                session,
                job,
                JobStatus.CANCELLED,
                reason=f"cancelled by {caller.subject}",
                actor=caller.subject,
            )
        elif status in CANCEL_VIA_CLUSTER:
            set_status(
                session,
                job,
                JobStatus.CANCELLING,
                reason=f"cancel requested by {caller.subject}; stopping the attempt",
                actor=caller.subject,
            )
            # Due for a look now, not at its next poll.
            session.execute(
                update(JobAttempt)
                .where(JobAttempt.job_id == job_id, JobAttempt.lease_token.is_(None))
                .values(lease_expires_at=None)
            )
    wakeup.work_available()
    return get_job(session, caller, job_id)


def list_events(
    session: Session, caller: Caller, job_id: str, *, limit: int, after: int | None
) -> list[JobEvent]:
    with read_only(session):
        load_job(session, caller, job_id)
        query = select(JobEvent).where(JobEvent.job_id == job_id)
        if after is not None:
            query = query.where(JobEvent.id > after)
        return list(session.scalars(query.order_by(JobEvent.id).limit(limit)))
