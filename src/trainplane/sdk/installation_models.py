"""What the SDK returns about the installation: clusters, projects, tokens,
the audit log, usage and the model registry (the rest is in ``models``)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from trainplane.sdk.models import Model, Page


class Cluster(Model):
    id: str
    name: str
    address: str
    accelerator: str
    gpus: int
    gpus_per_node: int
    gpu_memory_gb: float | None = None
    price_per_gpu_hour: float
    labels: dict[str, str]
    status: str
    status_message: str
    checked_at: datetime | None = None
    gpus_in_use: int
    live_attempts: int
    queued_jobs: int = 0
    queued_gpus: int = 0
    created_at: datetime


class ClusterList(Model):
    items: list[Cluster]
    queued_jobs: int = 0
    queued_gpus: int = 0


class Project(Model):
    id: str
    name: str
    description: str
    created_at: datetime
    max_gpus: int | None = None
    gpu_hours_per_month: float | None = None
    weight: float = 1.0
    storage: str | None = None  # the root an admin set; None: the default
    storage_root: str | None = None  # where the project's job folders go


class ProjectList(Model):
    items: list[Project]


class Secret(Model):
    """A project secret as the server shows it: never its value."""

    key: str
    created_at: datetime
    created_by: str
    updated_at: datetime
    updated_by: str


class SecretList(Model):
    items: list[Secret]


class Grant(Model):
    project: str | None = None
    role: str


class Token(Model):
    id: str
    name: str
    kind: str
    prefix: str
    status: str
    grants: list[Grant]
    created_by: str
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None


class TokenCreated(Token):
    token: str

    @property
    def secret(self) -> str:
        """The token to authenticate with; the server shows it this once."""
        return self.token


class TokenList(Model):
    items: list[Token]


class ServerFacts(Model):
    # True only for `trainplane up` on loopback: specs may name this machine's files.
    local_paths: bool = False


class WhoAmI(Model):
    subject: str
    token_id: str | None = None
    everywhere: str | None = None
    roles: dict[str, str]
    # None from a server that predates it: it takes no local paths either.
    server: ServerFacts | None = None


class AuditEvent(Model):
    id: int
    created_at: datetime
    actor: str
    action: str
    project_id: str | None = None
    target: str
    detail: dict[str, Any]


class UsageTotals(Model):
    gpu_hours: float
    cost: float
    jobs: int
    lost_gpu_hours: float


class ProjectUsage(UsageTotals):
    project: str


class ExperimentUsage(UsageTotals):
    project: str
    experiment: str


class JobUsage(UsageTotals):
    id: str
    name: str
    project: str
    experiment: str


class DayUsage(Model):
    day: date
    gpu_hours: dict[str, float]


class Usage(Model):
    since: datetime
    until: datetime
    total: UsageTotals
    by_project: list[ProjectUsage]
    by_experiment: list[ExperimentUsage]
    by_job: list[JobUsage]
    by_day: list[DayUsage]


class ProducedBy(Model):
    job_id: str
    job_name: str
    project: str
    run_id: str | None = None
    run_url: str | None = None


class ModelVersion(Model):
    version: str
    aliases: list[str]
    status: str | None = None
    source: str | None = None
    run_id: str | None = None
    created_at: datetime | None = None
    job: ProducedBy | None = None


class RegisteredModel(Model):
    name: str
    versions: list[ModelVersion]


class ModelPage(Page[RegisteredModel]):
    mlflow_error: str | None = None
