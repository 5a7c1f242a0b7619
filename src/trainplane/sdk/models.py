"""What the SDK returns about jobs (``installation_models`` has the rest):
the server's response bodies as frozen pydantic models. Extra fields are
kept, so a newer server that adds fields does not break an older client;
``tests/sdk`` checks each field against the server's OpenAPI document, so no
field here can drift from the server."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from trainplane.jobs.states import TERMINAL_STATUSES, AttemptStatus, JobStatus
from trainplane.sdk.errors import JobFailed

T = TypeVar("T")


class Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class CursorPaged(Model):
    """A body continued by passing its ``next_cursor`` as ``cursor``."""

    next_cursor: str | None = None

    def next_params(self) -> dict[str, str] | None:
        """The query that asks for the next page; None after the last."""
        return {"cursor": self.next_cursor} if self.next_cursor else None


class Page(CursorPaged, Generic[T]):
    """One page of a keyset-paged list."""

    items: list[T]


class AfterPage(Model, Generic[T]):
    """A page of an id-ordered list (events, audit), continued ``after`` an id."""

    items: list[T]
    next_after: int | None = None

    def next_params(self) -> dict[str, int] | None:
        return {"after": self.next_after} if self.next_after is not None else None


# --- jobs --------------------------------------------------------------------------


class JobSummary(Model):
    id: str
    name: str
    project: str
    kind: str
    status: JobStatus
    reason: str
    queue_position: int | None = None
    terminal: bool
    priority: str
    gpus: int
    strategy: str
    submitted_by: str
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_seconds: float | None = None
    gpu_hours: float = 0.0
    cost: float = 0.0
    lost_gpu_hours: float = 0.0
    parent: str | None = None  # a trial's sweep

    @property
    def is_terminal(self) -> bool:
        """SUCCEEDED, FAILED or CANCELLED: it will not change again."""
        return self.status in TERMINAL_STATUSES

    @property
    def succeeded(self) -> bool:
        return self.status == JobStatus.SUCCEEDED

    def raise_for_status(self) -> None:
        """Raise JobFailed if the job ended without succeeding."""
        if self.is_terminal and not self.succeeded:
            raise JobFailed(self)


class Attempt(Model):
    number: int
    id: str
    status: AttemptStatus
    cluster: str | None = None
    reason: str
    exit_code: int | None = None
    created_at: datetime
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


class Progress(Model):
    """Where the latest attempt stands, as its runtime last reported."""

    attempt: int
    step: int | None = None
    total_steps: int | None = None
    last_heartbeat_at: datetime | None = None
    last_progress_at: datetime | None = None


class Tracking(Model):
    """The job's MLflow run."""

    status: str
    experiment: str
    experiment_id: str | None = None
    run_id: str | None = None
    run_url: str | None = None
    error: str | None = None
    error_at: datetime | None = None


class JobModel(Model):
    """The model version a job registered."""

    name: str
    version: str
    alias: str | None = None
    uri: str


# --- sweeps ----------------------------------------------------------------------------


class TrialObjective(Model):
    metric: str
    value: float | None = None


class BestTrial(Model):
    """The succeeded trial with the best objective value."""

    id: str
    name: str
    number: int
    parameters: dict[str, Any]
    objective: TrialObjective


class TrialCounts(Model):
    """A sweep's trials by how they stand (running: not ended yet)."""

    running: int = 0
    succeeded: int = 0
    pruned: int = 0
    failed: int = 0


class Trial(Model):
    """One trial of a sweep: an ordinary job (``id``) with its parameters and
    its objective's last and best values; ``values`` by decision step."""

    id: str
    name: str
    number: int
    status: JobStatus
    reason: str
    parameters: dict[str, Any]
    objective: str
    last_value: float | None = None
    best_value: float | None = None
    step: int | None = None
    values: dict[str, float] = {}
    gpu_hours: float = 0.0
    cost: float = 0.0
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def pruned(self) -> bool:
        return self.status == JobStatus.CANCELLED and self.reason.startswith("pruned")


class SweepObjective(Model):
    metric: str
    mode: Literal["min", "max"]


class Trials(Model):
    """A sweep's trials by number, its objective and its best trial so far."""

    items: list[Trial]
    objective: SweepObjective
    best_trial: BestTrial | None = None


class Job(JobSummary):
    """A job in full: its spec, attempts, progress, tracking and model; a
    sweep's best trial and trial counts."""

    spec: dict[str, Any]
    attempts: list[Attempt] = []
    progress: Progress | None = None
    latest_metrics: dict[str, float] = {}
    tracking: Tracking
    registered_model: JobModel | None = None
    strategy_reason: str = ""
    best_trial: BestTrial | None = None
    trials: TrialCounts | None = None


class Event(Model):
    """One status change of a job."""

    id: int
    job_id: str
    created_at: datetime
    from_status: JobStatus | None = None
    to_status: JobStatus
    reason: str
    message: str
    actor: str


class MetricPoint(Model):
    id: int
    attempt: int
    step: int
    time: float
    metrics: dict[str, float]


class Metrics(CursorPaged):
    job_id: str
    progress: Progress | None = None
    points: list[MetricPoint]


class Checkpoint(Model):
    step: int
    uri: str
    created_at: datetime
    metrics: dict[str, float]
    strategy: str
    format: str
    world_size: int
    files: int
    size_bytes: int
    attempt_id: str | None = None


class Checkpoints(Model):
    job_id: str
    storage: str
    checkpoints: list[Checkpoint]


class LogEvent(Model):
    """One event of a followed log: ``status`` and ``end`` (``status``,
    ``reason``), ``attempt`` (``attempt``, ``cluster``) or ``log`` (``text``)."""

    event: str
    text: str = ""
    status: JobStatus | None = None
    reason: str | None = None
    attempt: int | None = None
    cluster: str | None = None

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n") if self.text else []


class ResultError(Model):
    type: str
    message: str
    traceback: str


class JobResult(Model):
    """What a job's function returned or raised, as its runtime recorded it."""

    job_id: str
    attempt_id: str
    attempt: int
    outcome: Literal["returned", "raised"]
    rank: int
    value: str | None = None
    value_bytes: int
    value_repr: str = ""
    error: ResultError | None = None
    created_at: datetime

    @property
    def pickled(self) -> bytes | None:
        """``value`` decoded from base64: a cloudpickle, not unpickled here."""
        return None if self.value is None else base64.b64decode(self.value)


# --- plan and compare ----------------------------------------------------------------


class InputCheck(Model):
    name: str
    ok: bool = True
    detail: str


class PlannedPlacement(Model):
    cluster: str | None = None
    can_start_now: bool
    queue_position: int
    reason: str
    expected_start_in_seconds: float | None = None
    expected_start_basis: str = ""


class StrategyEstimate(Model):
    strategy: str
    total_gb: float
    fits: bool | None = None


class StrategyPlan(Model):
    requested: str
    chosen: str
    spec: dict[str, Any]
    reason: str
    compared_with: str | None = None
    candidates: list[StrategyEstimate]


class MemoryEstimate(Model):
    strategy: str
    per_gpu_gb: dict[str, float]
    total_gb: float
    gpu_memory_gb: float | None = None
    fraction: float | None = None
    host_per_worker_gb: dict[str, float]
    notes: list[str]


class CostEstimate(Model):
    cluster: str | None = None
    price_per_gpu_hour: float | None = None
    expected_seconds: float | None = None
    expected_cost: float | None = None
    max_cost: float | None = None
    basis: str


class Plan(Model):
    """What submitting a spec would do; nothing was created."""

    valid: bool = True
    spec: dict[str, Any]
    checks: list[InputCheck]
    placement: PlannedPlacement
    strategy: StrategyPlan
    memory: MemoryEstimate | None = None
    cost: CostEstimate


class ComparedJob(Model):
    id: str
    name: str
    project: str
    status: JobStatus
    strategy: str
    gpus: int
    duration_seconds: float | None = None
    gpu_hours: float
    cost: float
    run_id: str | None = None
    run_url: str | None = None


class SpecDifference(Model):
    field: str
    values: list[Any]


class MetricComparison(Model):
    name: str
    values: list[float | None]


class Comparison(Model):
    jobs: list[ComparedJob]
    spec_differences: list[SpecDifference]
    metrics: list[MetricComparison]


class Bundle(Model):
    """A project's code bundle (a zip), stored once by its digest."""

    digest: str
    project: str
    size_bytes: int
    files: int
    created_at: datetime


class InputFile(Model):
    """A fine-tune's input (a dataset file, a model folder) in the project's
    storage, stored once by its digest; a spec names its ``location``."""

    digest: str
    project: str
    kind: Literal["file", "folder"]
    location: str
    size_bytes: int
    files: int


class Health(Model):
    status: str
    checks: dict[str, str] = {}
