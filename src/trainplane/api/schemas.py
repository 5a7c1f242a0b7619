"""Response bodies of the API, built from ORM rows by ``from_row`` functions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import Response
from pydantic import BaseModel, Field
from sqlalchemy import Row

from trainplane.db.models import Job, JobEvent, Project
from trainplane.jobs.spec import Priority, ProjectName
from trainplane.jobs.states import TERMINAL_STATUSES, JobStatus


class ProjectCreate(BaseModel):
    model_config = {"extra": "forbid"}

    name: ProjectName
    description: str = Field(default="", max_length=2000)


class ProjectOut(BaseModel):
    id: str
    name: str
    description: str
    created_at: datetime

    @classmethod
    def from_row(cls, row: Project) -> ProjectOut:
        return cls(id=row.id, name=row.name, description=row.description, created_at=row.created_at)


class ProjectList(BaseModel):
    items: list[ProjectOut]


class JobSummary(BaseModel):
    id: str
    name: str
    project: str
    kind: str
    status: JobStatus
    reason: str = Field(description="Why the job is in its status, in words.")
    terminal: bool
    priority: str
    gpus: int
    strategy: str
    submitted_by: str
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def fields_of(cls, row: Job | Row[Any]) -> dict[str, Any]:
        """From a Job, or a row of ``trainplane.services.jobs.SUMMARY_COLUMNS``."""
        return {
            "id": row.id,
            "name": row.name,
            "project": row.project_name,
            "kind": row.kind,
            "status": row.status,
            "reason": row.reason,
            "terminal": JobStatus(row.status) in TERMINAL_STATUSES,
            "priority": Priority(row.priority).name,
            "gpus": row.gpus,
            "strategy": row.strategy,
            "submitted_by": row.submitted_by,
            "created_at": row.created_at,
            "updated_at": row.updated_at,
            "started_at": row.started_at,
            "finished_at": row.finished_at,
        }

    @classmethod
    def from_row(cls, row: Job | Row[Any]) -> JobSummary:
        return cls(**cls.fields_of(row))


class JobOut(JobSummary):
    spec: dict[str, Any] = Field(description="The validated spec, with defaults filled in.")

    @classmethod
    def from_row(cls, row: Job) -> JobOut:
        return cls(**cls.fields_of(row), spec=row.spec)


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
