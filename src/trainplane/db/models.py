"""ORM models: projects, jobs, job attempts, job events, job metrics, the
MLflow tracking state of jobs, code bundles, function results and clusters.
(Sweep trials: db.sweep_models; secrets, owned names, API tokens and the
audit trail: db.access_models.)

A job keeps its full validated spec as a JSON document; the columns next to it
repeat the few fields that queries filter or order by (status, project, name,
priority, created time, GPU count), so no query ever reaches into the JSON.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from trainplane.db import access_models as access_models  # registers its tables too
from trainplane.db.base import Base, JSONDocument, UTCDateTime, in_list, utcnow
from trainplane.db.sweep_models import SweepTrial as SweepTrial
from trainplane.jobs.states import AttemptStatus, JobStatus

JOB_STATUS_VALUES = [s.value for s in JobStatus]
ATTEMPT_STATUS_VALUES = [s.value for s in AttemptStatus]


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Quotas; NULL: no limit. GPU-hours count per calendar month (UTC).
    max_gpus: Mapped[int | None] = mapped_column(Integer)
    gpu_hours_per_month: Mapped[float | None] = mapped_column(Float)
    # Fair share: GPUs go to the project with the fewest in use per weight.
    weight: Mapped[float] = mapped_column(Float, default=1.0, server_default="1")
    # The project's storage root (an absolute path or s3://bucket/prefix), set
    # by an installation admin; NULL: <the server's default storage>/<name>.
    # Every job folder and resumed checkpoint of the project lies under it.
    storage: Mapped[str | None] = mapped_column(String(1024))


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(in_list("status", JOB_STATUS_VALUES), name="status"),
        CheckConstraint(in_list("kind", ["train", "finetune", "sweep"]), name="kind"),
        CheckConstraint("gpus >= 1", name="gpus_positive"),
        # An idempotency key is scoped to whoever submitted it.
        UniqueConstraint("submitted_by", "idempotency_key"),
        # Keyset pagination, newest first, optionally within a project or status.
        Index("ix_jobs_created_at_id", "created_at", "id"),
        Index("ix_jobs_project_id_created_at_id", "project_id", "created_at", "id"),
        Index("ix_jobs_status_created_at_id", "status", "created_at", "id"),
        Index("ix_jobs_project_id_name_created_at_id", "project_id", "name", "created_at", "id"),
        Index("ix_jobs_parent_id_created_at_id", "parent_id", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="RESTRICT"))
    name: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    priority: Mapped[int] = mapped_column(SmallInteger)
    gpus: Mapped[int] = mapped_column(Integer)
    # Placement reads these for every queued job, so they live beside the spec.
    gpus_per_node: Mapped[int | None] = mapped_column(Integer)
    gpu_type: Mapped[str | None] = mapped_column(String(64))
    max_runtime_seconds: Mapped[int | None] = mapped_column(Integer)
    # The memory estimate per GPU (GB), when the spec allowed one: placement
    # passes over clusters whose GPUs are smaller.
    gpu_memory_gb: Mapped[float | None] = mapped_column(Float)
    strategy: Mapped[str] = mapped_column(String(16))
    # How strategy: auto chose it (the memory estimates that decided); empty
    # when the spec named the strategy.
    strategy_reason: Mapped[str] = mapped_column(Text, default="", server_default="")
    spec: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    spec_hash: Mapped[str] = mapped_column(String(64))
    submitted_by: Mapped[str] = mapped_column(String(255))
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # When a RESTARTING job's backoff ends and it may be queued again.
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The job's own folder (checkpoints/ and model/ below it), fixed at submit
    # under its project's storage root, so a later change of that root never
    # moves a job's checkpoints. NULL for jobs submitted before it was kept.
    folder: Mapped[str | None] = mapped_column(String(1024))
    # How long first come, first served would have made it wait, estimated
    # when the scheduler first saw it queued (services.wait_bounds): the
    # longest of these lately bounds every job's wait. NULL until then.
    fifo_wait_seconds: Mapped[float | None] = mapped_column(Float)
    # The service level it skips to past its first (services.entry_levels);
    # decided when the scheduler first saw it. NULL until then (counts as 0).
    entry_level: Mapped[int | None] = mapped_column(Integer)
    # A trial's sweep (a job of kind sweep); NULL for every other job.
    parent_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))

    project: Mapped[Project] = relationship(lazy="joined", innerjoin=True)

    @property
    def project_name(self) -> str:
        return self.project.name


# The queue order (services.placement.queue_order) as one index walk.
Index("ix_jobs_queue_order", Job.status, Job.priority.desc(), Job.created_at, Job.id)


class JobAttempt(Base):
    """One try at running a job; maps to exactly one Ray job whose
    ``submission_id`` is this attempt's id."""

    __tablename__ = "job_attempts"
    __table_args__ = (
        UniqueConstraint("job_id", "number"),
        CheckConstraint(in_list("status", ATTEMPT_STATUS_VALUES), name="status"),
        Index("ix_job_attempts_status_lease_expires_at", "status", "lease_expires_at"),
    )

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    cluster_id: Mapped[str | None] = mapped_column(
        ForeignKey("clusters.id", ondelete="SET NULL"), index=True
    )
    status: Mapped[str] = mapped_column(String(16), default="PENDING")
    exit_code: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    submitted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The last time the cluster answered about this attempt.
    last_seen_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Why trainplane asked the cluster to stop it (cancel, max_runtime), if it did.
    stop_reason: Mapped[str | None] = mapped_column(String(32))
    # When the stop was asked for. A preempted attempt gets a grace period
    # from then to checkpoint and stop by itself before the cluster stops it.
    stop_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The job whose GPUs this attempt was stopped to free (stop_reason preempted).
    preempted_by: Mapped[str | None] = mapped_column(String(26))
    # The end of the attempt's log, kept once it ends: clusters forget.
    log_tail: Mapped[str] = mapped_column(Text, default="", server_default="")
    # A scheduler works on an attempt only while it holds its lease; results
    # are applied only where the token still matches.
    lease_token: Mapped[str | None] = mapped_column(String(32))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # What the attempt's runtime last reported (POST .../progress). The step
    # is the training step; last_progress_at is when it last went up, which is
    # what stuck detection looks at.
    progress_step: Mapped[int | None] = mapped_column(Integer)
    total_steps: Mapped[int | None] = mapped_column(Integer)
    last_heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_progress_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The last value of each metric the attempt reported ({name: value}),
    # merged into on every report: final metrics without scanning the points.
    latest_metrics: Mapped[dict[str, float] | None] = mapped_column(JSONDocument)
    # Restarts Ray Train made within the attempt, as its runtime reported them:
    # they spend the job's restart budget (jobs.retries).
    in_place_restarts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class JobEvent(Base):
    """A status change of a job, written in the same transaction as the change."""

    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_job_id_id", "job_id", "id"),)

    # BIGINT on Postgres; SQLite only auto-increments a plain INTEGER key.
    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    message: Mapped[str] = mapped_column(Text, default="")
    actor: Mapped[str] = mapped_column(String(255), default="")


class JobMetric(Base):
    """One point of a job's metrics (loss, throughput, ...) at a step, as its
    runtime reported it."""

    __tablename__ = "job_metrics"
    # Reads page through one job's points in id order.
    __table_args__ = (Index("ix_job_metrics_job_id_id", "job_id", "id"),)

    # BIGINT on Postgres; SQLite only auto-increments a plain INTEGER key.
    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    # The attempt is kept by id and number: reads show the number without a join.
    attempt_id: Mapped[str] = mapped_column(String(26))
    attempt: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime)
    values: Mapped[dict[str, float]] = mapped_column(JSONDocument)


class JobTracking(Base):
    """A job's MLflow run, and how far the job has been written to it.

    Created when a job is first placed. The tracking loop claims rows under a
    lease (like attempts), writes to MLflow with no transaction open, and
    applies the result only while its token holds. ``lease_expires_at``
    doubles as "look again at"; ``finished_at`` is set once the run is closed,
    every metric point is in it and the model (if any) is registered.
    """

    __tablename__ = "job_tracking"
    __table_args__ = (
        Index("ix_job_tracking_finished_at_lease_expires_at", "finished_at", "lease_expires_at"),
    )

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    experiment_id: Mapped[str | None] = mapped_column(String(64))
    run_id: Mapped[str | None] = mapped_column(String(64))
    run_url: Mapped[str | None] = mapped_column(Text)
    # job_metrics.id of the last point written to the run.
    synced_metric_id: Mapped[int] = mapped_column(BigInteger, default=0)
    # What the run's attempt tags last described (see tracking.run_data).
    synced_attempts: Mapped[str] = mapped_column(String(255), default="")
    model_name: Mapped[str | None] = mapped_column(String(256))
    model_version: Mapped[str | None] = mapped_column(String(32))
    # The last failure to write to MLflow; cleared by the next success.
    error: Mapped[str | None] = mapped_column(Text)
    error_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    lease_token: Mapped[str | None] = mapped_column(String(32))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class CodeBundle(Base):
    """An uploaded zip of a job's code (``entrypoint.code``), kept in the
    database so that every replica and scheduler can read it. Content
    addressed: the same bytes in a project are one row."""

    __tablename__ = "code_bundles"
    __table_args__ = (UniqueConstraint("project_id", "digest"),)

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    digest: Mapped[str] = mapped_column(String(71))  # sha256:<64 hex>
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    files: Mapped[int] = mapped_column(Integer)
    content: Mapped[bytes] = mapped_column(LargeBinary)
    created_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Uploaded again or named by a submitted job: the retention sweep
    # (services/bundles.delete_unused_bundles) counts from here.
    last_used_at: Mapped[datetime] = mapped_column(UTCDateTime)


class JobResult(Base):
    """What a function job's train function did, as its ranks reported: rank
    0's return value (pickled), or the first rank's exception with its
    traceback. One per attempt."""

    __tablename__ = "job_results"
    __table_args__ = (
        CheckConstraint(in_list("outcome", ["returned", "raised"]), name="outcome"),
        Index("ix_job_results_job_id_created_at", "job_id", "created_at"),
    )

    attempt_id: Mapped[str] = mapped_column(
        ForeignKey("job_attempts.id", ondelete="CASCADE"), primary_key=True
    )
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    outcome: Mapped[str] = mapped_column(String(16))
    rank: Mapped[int] = mapped_column(Integer)
    # A cloudpickle of the return value; NULL when the function raised.
    value: Mapped[bytes | None] = mapped_column(LargeBinary)
    value_bytes: Mapped[int] = mapped_column(Integer, default=0)
    # repr() of the value, cut short: readable without unpickling.
    value_repr: Mapped[str] = mapped_column(Text, default="")
    error_type: Mapped[str | None] = mapped_column(String(255))
    error_message: Mapped[str | None] = mapped_column(Text)
    traceback: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Cluster(Base):
    """A Ray cluster trainplane may place jobs on, registered by dashboard address."""

    __tablename__ = "clusters"
    __table_args__ = (
        CheckConstraint("gpus >= 0", name="gpus_nonnegative"),
        CheckConstraint("gpus_per_node >= 1", name="gpus_per_node_positive"),
    )

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    address: Mapped[str] = mapped_column(String(1024))
    accelerator: Mapped[str] = mapped_column(String(32))
    gpus: Mapped[int] = mapped_column(Integer)
    gpus_per_node: Mapped[int] = mapped_column(Integer)
    gpu_memory_gb: Mapped[float | None] = mapped_column(Float)
    price_per_gpu_hour: Mapped[float] = mapped_column(Float, default=0.0)
    labels: Mapped[dict[str, str]] = mapped_column(JSONDocument, default=dict)
    # Whether it adds nodes on demand (from zero: minutes before a worker is
    # placed), and how long an attempt waits for its workers; None: a default
    # by ``autoscaling`` (runtime.start_timeout).
    autoscaling: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    start_timeout_seconds: Mapped[int | None] = mapped_column(Integer)
    # READY, UNREACHABLE or UNKNOWN (not checked yet), from the scheduler's probe.
    status: Mapped[str] = mapped_column(String(16), default="UNKNOWN", server_default="UNKNOWN")
    status_message: Mapped[str] = mapped_column(Text, default="", server_default="")
    checked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
