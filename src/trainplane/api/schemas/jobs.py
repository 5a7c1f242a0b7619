"""Bodies of ``/v1/jobs``: a job, its attempts and its events."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import Row

from trainplane.api.schemas.progress import ProgressOut
from trainplane.api.schemas.sweeps import BestTrialOut, TrialCountsOut
from trainplane.api.schemas.tracking import RegisteredModelOut, TrackingOut
from trainplane.db.base import utcnow
from trainplane.db.models import Job, JobEvent
from trainplane.jobs.spec import Priority
from trainplane.jobs.states import TERMINAL_STATUSES, AttemptStatus, JobStatus
from trainplane.services.jobs import AttemptRow, JobDetail
from trainplane.services.progress import Progress
from trainplane.services.queue import QueueView
from trainplane.services.tracking import tracking_view
from trainplane.services.usage import JobUsage


class JobSummary(BaseModel):
    id: str
    name: str
    project: str
    kind: str
    status: JobStatus
    reason: str = Field(description="Why the job is in its status, in words.")
    queue_position: int | None = Field(
        default=None, description="For QUEUED jobs: 1 is next in line."
    )
    terminal: bool
    priority: str
    gpus: int
    strategy: str
    submitted_by: str
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_seconds: float | None = Field(
        default=None, description="From its first start to its end, or to now while it runs."
    )
    gpu_hours: float = Field(default=0.0, description="GPU time of all its attempts so far.")
    cost: float = Field(default=0.0, description="gpu_hours at the prices of its clusters.")
    lost_gpu_hours: float = Field(
        default=0.0,
        description="Of gpu_hours, those of attempts a later attempt replaced (after a "
        "failure, a lost cluster or a preemption).",
    )
    parent: str | None = Field(default=None, description="A trial's sweep; null otherwise.")

    @classmethod
    def fields_of(
        cls, row: Job | Row[Any], queue: QueueView | None, usage: JobUsage | None = None
    ) -> dict[str, Any]:
        """From a Job, or a row of ``trainplane.services.jobs.SUMMARY_COLUMNS``,
        with the live queue view of a QUEUED job and its GPU time so far."""
        usage = usage or JobUsage()
        return {
            "id": row.id,
            "name": row.name,
            "project": row.project_name,
            "kind": row.kind,
            "status": row.status,
            "reason": queue.reason if queue else row.reason,
            "queue_position": queue.position if queue else None,
            "terminal": JobStatus(row.status) in TERMINAL_STATUSES,
            "priority": Priority(row.priority).name,
            "gpus": row.gpus,
            "strategy": row.strategy,
            "submitted_by": row.submitted_by,
            "created_at": row.created_at,
            "updated_at": row.updated_at,
            "started_at": row.started_at,
            "finished_at": row.finished_at,
            "duration_seconds": _duration(row.started_at, row.finished_at),
            "gpu_hours": round(usage.gpu_hours, 6),
            "cost": round(usage.cost, 6),
            "lost_gpu_hours": round(usage.lost_gpu_hours, 6),
            "parent": row.parent_id,
        }

    @classmethod
    def from_row(
        cls, row: Job | Row[Any], queue: QueueView | None = None, usage: JobUsage | None = None
    ) -> JobSummary:
        return cls(**cls.fields_of(row, queue, usage))


def _duration(started_at: datetime | None, finished_at: datetime | None) -> float | None:
    if started_at is None:
        return None
    return max(0.0, ((finished_at or utcnow()) - started_at).total_seconds())


class AttemptOut(BaseModel):
    number: int
    id: str = Field(description="Also the Ray job's submission id.")
    status: AttemptStatus
    cluster: str | None
    reason: str
    exit_code: int | None
    created_at: datetime
    submitted_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def from_row(cls, row: AttemptRow) -> AttemptOut:
        a = row.attempt
        return cls(
            number=a.number,
            id=a.id,
            status=a.status,
            cluster=row.cluster_name,
            reason=a.reason,
            exit_code=a.exit_code,
            created_at=a.created_at,
            submitted_at=a.submitted_at,
            started_at=a.started_at,
            finished_at=a.finished_at,
        )


class JobOut(JobSummary):
    spec: dict[str, Any] = Field(description="The validated spec, with defaults filled in.")
    attempts: list[AttemptOut] = Field(default_factory=list)
    progress: ProgressOut | None = Field(
        default=None, description="Null until the latest attempt has reported."
    )
    latest_metrics: dict[str, float] = Field(
        default_factory=dict, description="The last reported value of each metric."
    )
    tracking: TrackingOut
    registered_model: RegisteredModelOut | None = Field(
        default=None, description="The model version this job registered, once it has."
    )
    strategy_reason: str = Field(
        default="",
        description="How strategy auto picked the strategy; empty when the spec named it.",
    )
    best_trial: BestTrialOut | None = Field(
        default=None, description="A sweep's best trial so far; null for other jobs."
    )
    trials: TrialCountsOut | None = Field(
        default=None, description="A sweep's trials by state; null for other jobs."
    )

    @classmethod
    def from_detail(cls, detail: JobDetail, *, tracking_enabled: bool) -> JobOut:
        job = detail.job
        latest = detail.attempts[-1].attempt if detail.attempts else None
        tracking = tracking_view(
            detail.tracking, job.spec, job.project_name, enabled=tracking_enabled
        )
        return cls(
            **cls.fields_of(job, detail.queue, detail.usage),
            spec=detail.spec,
            attempts=[AttemptOut.from_row(a) for a in detail.attempts],
            progress=ProgressOut.from_progress(Progress.of(latest) if latest else None),
            latest_metrics=detail.latest_metrics,
            tracking=TrackingOut.from_view(tracking),
            registered_model=RegisteredModelOut.from_view(tracking, job.spec),
            strategy_reason=job.strategy_reason or "",
            best_trial=BestTrialOut.of(detail.sweep),
            trials=TrialCountsOut.of(detail.sweep),
        )

    @classmethod
    def from_new(cls, job: Job, *, tracking_enabled: bool) -> JobOut:
        """A job just submitted: queued, no attempts yet."""
        tracking = tracking_view(None, job.spec, job.project_name, enabled=tracking_enabled)
        return cls(
            **cls.fields_of(job, None),
            spec=job.spec,
            tracking=TrackingOut.from_view(tracking),
            strategy_reason=job.strategy_reason or "",
            trials=TrialCountsOut() if job.kind == "sweep" else None,
        )


class JobPage(BaseModel):
    items: list[JobSummary]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null at the end."
    )


class EventOut(BaseModel):
    id: int
    job_id: str
    created_at: datetime
    from_status: JobStatus | None
    to_status: JobStatus
    reason: str
    message: str
    actor: str

    @classmethod
    def from_row(cls, row: JobEvent) -> EventOut:
        return cls(
            id=row.id,
            job_id=row.job_id,
            created_at=row.created_at,
            from_status=row.from_status,
            to_status=row.to_status,
            reason=row.reason,
            message=row.message,
            actor=row.actor,
        )


class EventList(BaseModel):
    items: list[EventOut]
    next_after: int | None = Field(
        description="Pass as `after` for the next page; null at the end."
    )
