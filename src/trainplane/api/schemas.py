"""Response bodies of the API, built from ORM rows by ``from_row`` functions
(projects' in ``project_schemas``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Response
from pydantic import BaseModel, Field, StringConstraints, model_validator
from pydantic_core import PydanticCustomError
from sqlalchemy import Row

from trainplane.api.tracking_schemas import RegisteredModelOut, TrackingOut
from trainplane.db.base import utcnow
from trainplane.db.models import Job, JobEvent
from trainplane.jobs.spec import Priority
from trainplane.jobs.states import TERMINAL_STATUSES, AttemptStatus, JobStatus
from trainplane.runtime.start_timeout import AUTOSCALING_START_TIMEOUT, FIXED_START_TIMEOUT
from trainplane.services.checkpoints import JobCheckpoints
from trainplane.services.clusters import ClusterView
from trainplane.services.jobs import AttemptRow, JobDetail
from trainplane.services.progress import MetricsPage, Progress, StopRequest
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


class ProgressOut(BaseModel):
    """Where the latest attempt stands, as its runtime last reported."""

    attempt: int = Field(description="The attempt's number.")
    step: int | None
    total_steps: int | None
    last_heartbeat_at: datetime | None = Field(description="Its last report of any kind.")
    last_progress_at: datetime | None = Field(description="When its step last went up.")

    @classmethod
    def from_progress(cls, progress: Progress | None) -> ProgressOut | None:
        if progress is None:
            return None
        return cls.model_validate(progress, from_attributes=True)


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


class MetricPointOut(BaseModel):
    id: int
    attempt: int = Field(description="The number of the attempt that reported it.")
    step: int
    time: float = Field(description="When it was measured, unix seconds (as reported).")
    metrics: dict[str, float]


class StopRequestOut(BaseModel):
    reason: str = Field(description="`preempted`: a higher-priority job needs the GPUs.")
    requested_at: datetime


class ProgressAckOut(BaseModel):
    stop: StopRequestOut | None = Field(
        description="Set when the attempt should save a checkpoint and stop now; its "
        "cluster stops it at the end of the grace period otherwise."
    )

    @classmethod
    def of(cls, stop: StopRequest | None) -> ProgressAckOut:
        if stop is None:
            return cls(stop=None)
        return cls(stop=StopRequestOut(reason=stop.reason, requested_at=stop.requested_at))


class MetricsOut(BaseModel):
    job_id: str
    progress: ProgressOut | None = Field(description="Null until the latest attempt has reported.")
    points: list[MetricPointOut] = Field(description="Oldest first.")
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null at the end."
    )

    @classmethod
    def from_page(cls, page: MetricsPage) -> MetricsOut:
        return cls(
            job_id=page.job_id,
            progress=ProgressOut.from_progress(page.progress),
            points=[
                MetricPointOut(
                    id=p.id,
                    attempt=p.attempt,
                    step=p.step,
                    time=p.recorded_at.timestamp(),
                    metrics=p.values,
                )
                for p in page.points
            ],
            next_cursor=page.next_cursor,
        )


class CheckpointOut(BaseModel):
    step: int
    uri: str
    created_at: datetime
    metrics: dict[str, float]
    strategy: str
    format: str = Field(description="How the files are laid out: state-dict, dcp, deepspeed.")
    world_size: int
    files: int
    size_bytes: int
    attempt_id: str | None


class CheckpointList(BaseModel):
    job_id: str
    storage: str = Field(description="The job's checkpoint folder.")
    checkpoints: list[CheckpointOut] = Field(description="Complete ones only, newest step first.")

    @classmethod
    def from_listing(cls, listing: JobCheckpoints) -> CheckpointList:
        return cls(
            job_id=listing.job_id,
            storage=listing.storage,
            checkpoints=[CheckpointOut(**c) for c in listing.checkpoints],
        )


class Health(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)


def json_response(
    body: BaseModel, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """Serialise ``body`` once. Routes still declare ``response_model`` for the
    OpenAPI document; returning a Response skips FastAPI's second validation of
    a model that is already typed."""
    return Response(
        body.model_dump_json(),
        status_code=status_code,
        media_type="application/json",
        headers=headers,
    )


ClusterName = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?$"),
    Field(description="Lowercase letters, digits, '-' and '_'; 1-63 characters."),
]


AUTOSCALING_HELP = (
    "Whether the cluster adds nodes on demand (a KubeRay autoscaler): its attempts then wait "
    f"{AUTOSCALING_START_TIMEOUT:.0f} s by default for their workers to be placed."
)
START_TIMEOUT_HELP = (
    "Seconds an attempt waits for the cluster to place its workers before it fails; null: "
    f"{AUTOSCALING_START_TIMEOUT:.0f} if autoscaling, else {FIXED_START_TIMEOUT:.0f}."
)


class ClusterCreate(BaseModel):
    model_config = {"extra": "forbid"}

    name: ClusterName
    address: Annotated[
        str,
        StringConstraints(pattern=r"^https?://[^\s/]+(?::\d+)?/?$", max_length=1024),
        Field(description="The Ray dashboard address, e.g. http://ray-head:8265."),
    ]
    accelerator: Annotated[
        str,
        StringConstraints(pattern=r"^[A-Za-z0-9._-]{1,32}$"),
        Field(description="cpu, or the GPU type: H100, H200, A10, ..."),
    ] = "cpu"
    gpus: int = Field(ge=1, le=1_000_000, description="Total accelerators (cpu: worker slots).")
    gpus_per_node: int | None = Field(default=None, ge=1, le=64, description="Default: gpus.")
    gpu_memory_gb: float | None = Field(default=None, gt=0, le=10_000)
    price_per_gpu_hour: float = Field(default=0.0, ge=0, le=10_000)
    labels: dict[
        Annotated[str, StringConstraints(min_length=1, max_length=63)],
        Annotated[str, StringConstraints(max_length=256)],
    ] = Field(default_factory=dict, max_length=64)
    autoscaling: bool = Field(default=False, description=AUTOSCALING_HELP)
    start_timeout_seconds: int | None = Field(
        default=None, ge=1, le=86_400, description=START_TIMEOUT_HELP
    )

    @model_validator(mode="after")
    def _whole_nodes(self) -> ClusterCreate:
        if self.accelerator.lower() == "cpu":
            self.accelerator = "cpu"
        per_node = self.gpus_per_node or self.gpus
        if self.gpus % per_node:
            raise PydanticCustomError(
                "gpus_per_node",
                "gpus ({gpus}) must be a multiple of gpus_per_node ({per_node})",
                {"gpus": self.gpus, "per_node": per_node},
            )
        self.gpus_per_node = per_node
        return self


class ClusterOut(BaseModel):
    id: str
    name: str
    address: str
    accelerator: str
    gpus: int
    gpus_per_node: int
    gpu_memory_gb: float | None
    price_per_gpu_hour: float
    labels: dict[str, str]
    autoscaling: bool = Field(default=False, description=AUTOSCALING_HELP)
    start_timeout_seconds: int | None = Field(default=None, description=START_TIMEOUT_HELP)
    status: str = Field(description="READY, UNREACHABLE, or UNKNOWN until first checked.")
    status_message: str
    checked_at: datetime | None
    gpus_in_use: int
    live_attempts: int
    queued_jobs: int = Field(
        default=0, description="Queued jobs, of every project, that this cluster could run."
    )
    queued_gpus: int = Field(default=0, description="The GPUs those queued jobs ask for.")
    created_at: datetime

    @classmethod
    def from_view(cls, view: ClusterView) -> ClusterOut:
        c = view.cluster
        return cls(
            id=c.id,
            name=c.name,
            address=c.address,
            accelerator=c.accelerator,
            gpus=c.gpus,
            gpus_per_node=c.gpus_per_node,
            gpu_memory_gb=c.gpu_memory_gb,
            price_per_gpu_hour=c.price_per_gpu_hour,
            labels=c.labels,
            autoscaling=c.autoscaling,
            start_timeout_seconds=c.start_timeout_seconds,
            status=c.status,
            status_message=c.status_message,
            checked_at=c.checked_at,
            gpus_in_use=view.gpus_in_use,
            live_attempts=view.live_attempts,
            queued_jobs=view.queued_jobs,
            queued_gpus=view.queued_gpus,
            created_at=c.created_at,
        )


class ClusterList(BaseModel):
    items: list[ClusterOut]
    queued_jobs: int = Field(default=0, description="All queued jobs, of every project.")
    queued_gpus: int = Field(default=0, description="The GPUs all queued jobs ask for.")
