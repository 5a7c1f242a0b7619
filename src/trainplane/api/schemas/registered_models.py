"""Bodies of ``GET /v1/models``: registered models and the jobs that produced them."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from trainplane.services.registered_models import ModelsPage, ModelVersionView


class ProducedByOut(BaseModel):
    job_id: str
    job_name: str
    project: str
    run_id: str | None
    run_url: str | None


class ModelVersionOut(BaseModel):
    version: str
    aliases: list[str]
    status: str | None = Field(description="MLflow's status; null when MLflow did not answer.")
    source: str | None
    run_id: str | None
    created_at: datetime | None
    job: ProducedByOut | None = Field(description="The trainplane job that produced it.")

    @classmethod
    def from_view(cls, view: ModelVersionView) -> ModelVersionOut:
        job = view.job
        return cls(
            version=view.version,
            aliases=list(view.aliases),
            status=view.status,
            source=view.source,
            run_id=view.run_id,
            created_at=view.created_at,
            job=ProducedByOut(**job.__dict__) if job else None,
        )


class ModelOut(BaseModel):
    name: str
    versions: list[ModelVersionOut] = Field(description="Newest first.")


class ModelList(BaseModel):
    items: list[ModelOut]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null at the end."
    )
    mlflow_error: str | None = Field(
        description="Set when MLflow did not answer: versions are then what trainplane "
        "recorded, without aliases or status."
    )

    @classmethod
    def from_page(cls, page: ModelsPage) -> ModelList:
        return cls(
            items=[
                ModelOut(name=m.name, versions=[ModelVersionOut.from_view(v) for v in m.versions])
                for m in page.items
            ],
            next_cursor=page.next_cursor,
            mlflow_error=page.mlflow_error,
        )
