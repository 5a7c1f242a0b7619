"""Registered models: the versions trainplane jobs produced, with the job of
each, as MLflow's registry has them now (aliases move in MLflow).

The caller sees the models its visible jobs registered into. MLflow is asked
with no transaction open; when it does not answer, the list still comes from
what trainplane recorded, with the error beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainplane.db.engine import read_only
from trainplane.db.models import Job, JobTracking, Project
from trainplane.services.access import Caller
from trainplane.tracking.client import MlflowTracking, TrackingError

VERSIONS_PER_MODEL = 100


@dataclass(frozen=True)
class ProducedBy:
    job_id: str
    job_name: str
    project: str
    run_id: str | None
    run_url: str | None


@dataclass(frozen=True)
class ModelVersionView:
    version: str
    aliases: tuple[str, ...] = ()
    status: str | None = None  # None: MLflow was not asked
    source: str | None = None
    run_id: str | None = None
    created_at: datetime | None = None
    job: ProducedBy | None = None


@dataclass(frozen=True)
class ModelView:
    name: str
    versions: list[ModelVersionView] = field(default_factory=list)


@dataclass(frozen=True)
class ModelsPage:
    items: list[ModelView]
    next_cursor: str | None
    mlflow_error: str | None


def list_models(
    session: Session,
    caller: Caller,
    mlflow: MlflowTracking,
    *,
    limit: int,
    after: str | None,
) -> ModelsPage:
    with read_only(session):
        names_query = (
            select(JobTracking.model_name)
            .join(Job, Job.id == JobTracking.job_id)
            .where(JobTracking.model_version.is_not(None), caller.scope(Job.project_id))
            .distinct()
            .order_by(JobTracking.model_name)
            .limit(limit + 1)
        )
        if after is not None:
            names_query = names_query.where(JobTracking.model_name > after)
        names = [name for name in session.scalars(names_query) if name]
        more = len(names) > limit
        names = names[:limit]
        rows = session.execute(
            select(
                JobTracking.model_name,
                JobTracking.model_version,
                JobTracking.run_id,
                JobTracking.run_url,
                JobTracking.finished_at,
                Job.id,
                Job.name,
                Project.name.label("project"),
            )
            .join(Job, Job.id == JobTracking.job_id)
            .join(Project, Project.id == Job.project_id)
            .where(JobTracking.model_name.in_(names), caller.scope(Job.project_id))
        ).all()
    produced = {
        (r.model_name, r.model_version): ProducedBy(r.id, r.name, r.project, r.run_id, r.run_url)
        for r in rows
    }
    mlflow_error = None
    try:
        registry = mlflow.versions(names, per_model=VERSIONS_PER_MODEL) if names else {}
    except TrackingError as exc:
        mlflow_error, registry = str(exc), None
    items = []
    for name in names:
        if registry is None:  # what trainplane recorded, newest first
            versions = sorted(
                (
                    ModelVersionView(
                        version=r.model_version,
                        run_id=r.run_id,
                        job=produced[(name, r.model_version)],
                    )
                    for r in rows
                    if r.model_name == name
                ),
                key=lambda v: int(v.version),
                reverse=True,
            )
        else:
            versions = [
                ModelVersionView(
                    version=v.version,
                    aliases=v.aliases,
                    status=v.status,
                    source=v.source,
                    run_id=v.run_id,
                    created_at=(
                        datetime.fromtimestamp(v.created_at_ms / 1000, UTC)
                        if v.created_at_ms
                        else None
                    ),
                    job=produced.get((name, v.version)),
                )
                for v in registry.get(name, [])
            ]
        items.append(ModelView(name=name, versions=versions))
    return ModelsPage(items, names[-1] if more else None, mlflow_error)
