"""Bodies of ``/v1/projects``: creating and changing a project (quotas,
weight, storage root), and how it is shown."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, field_validator

from trainplane.db.models import Project
from trainplane.jobs.spec import ProjectName
from trainplane.jobs.spec_fields import StorageUri, storage_uri


class ProjectCreate(BaseModel):
    model_config = {"extra": "forbid"}

    name: ProjectName
    description: str = Field(default="", max_length=2000)


class ProjectUpdate(BaseModel):
    """Fields to change; a field sent as null removes that limit."""

    model_config = {"extra": "forbid"}

    description: str | None = Field(default=None, max_length=2000)
    max_gpus: int | None = Field(default=None, ge=1, le=1_000_000)
    gpu_hours_per_month: float | None = Field(default=None, gt=0, le=1e9)
    # A number, never null (below): unset (the None default, never
    # validated), it is left as it is. The default stays out of the
    # document, where it would offer null.
    weight: float = Field(
        default=None,
        gt=0,
        le=1000,
        description="Fair-share weight (default 1).",
        json_schema_extra=lambda schema: schema.pop("default"),
    )

    storage: StorageUri | None = Field(
        default=None,
        description="The project's storage root: an absolute path or s3://bucket/prefix "
        "that its jobs' folders and resumed checkpoints must lie under; null: the "
        "default, <server storage>/<project>. Jobs submitted earlier keep their folders.",
    )

    @field_validator("weight", mode="before")
    @classmethod
    def _weight_not_null(cls, value: Any) -> Any:
        # Runs only when the field is sent: null would mean "no weight".
        if value is None:
            raise ValueError("cannot be null; 1 is the default")
        return value

    @field_validator("storage")
    @classmethod
    def _storage(cls, value: str | None) -> str | None:
        return None if value is None else storage_uri(value)


class ProjectOut(BaseModel):
    id: str
    name: str
    description: str
    created_at: datetime
    max_gpus: int | None = Field(default=None, description="GPUs in use at once; null: no limit.")
    gpu_hours_per_month: float | None = Field(
        default=None, description="GPU-hours per calendar month (UTC); null: no limit."
    )
    weight: float = Field(default=1.0, description="Fair-share weight.")
    storage: str | None = Field(
        default=None, description="The storage root an admin set; null: the default."
    )
    storage_root: str = Field(
        description="Where the project's job folders go, and what checkpoint.storage and "
        "checkpoint.resume must lie under: `storage`, or the default root."
    )

    @classmethod
    def from_row(cls, row: Project, storage_root: str) -> ProjectOut:
        return cls(
            id=row.id,
            name=row.name,
            description=row.description,
            created_at=row.created_at,
            max_gpus=row.max_gpus,
            gpu_hours_per_month=row.gpu_hours_per_month,
            weight=row.weight if row.weight is not None else 1.0,
            storage=row.storage,
            storage_root=storage_root,
        )


class ProjectList(BaseModel):
    items: list[ProjectOut]
