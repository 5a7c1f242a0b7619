"""Response bodies about MLflow: a job's run and registered model, and job
comparisons (the registered models list is in ``registered_models``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from trainplane.jobs.states import JobStatus
from trainplane.services.compare import ComparedJob, Comparison
from trainplane.services.tracking import TrackingView

TrackingStatus = Literal["disabled", "not_started", "pending", "active", "finished"]


class RegisteredModelOut(BaseModel):
    name: str
    version: str
    alias: str | None
    uri: str = Field(description="For mlflow.pyfunc.load_model and friends.")

    @classmethod
    def from_view(cls, view: TrackingView, spec: dict[str, Any]) -> RegisteredModelOut | None:
        if view.model_name is None or view.model_version is None:
            return None
        alias = (spec.get("register_model") or {}).get("alias")
        return cls(
            name=view.model_name,
            version=view.model_version,
            alias=alias,
            uri=f"models:/{view.model_name}/{view.model_version}",
        )


class TrackingOut(BaseModel):
    """The job's MLflow run."""

    status: TrackingStatus = Field(
        description="not_started: not placed yet; pending: placed, run not created yet; "
        "active: the run is written to; finished: the run is closed with every metric "
        "point in it and the model registered; disabled: the server does not track."
    )
    experiment: str
    experiment_id: str | None = None
    run_id: str | None = None
    run_url: str | None = Field(default=None, description="Null without an MLflow UI address.")
    error: str | None = Field(
        default=None,
        description="The last failure to write to MLflow; retried, and cleared by a success.",
    )
    error_at: datetime | None = None

    @classmethod
    def from_view(cls, view: TrackingView) -> TrackingOut:
        return cls(
            status=view.status,  # type: ignore[arg-type]
            experiment=view.experiment,
            experiment_id=view.experiment_id,
            run_id=view.run_id,
            run_url=view.run_url,
            error=view.error,
            error_at=view.error_at,
        )


# --- compare ------------------------------------------------------------------------


class ComparedJobOut(BaseModel):
    id: str
    name: str
    project: str
    status: JobStatus
    strategy: str
    gpus: int
    duration_seconds: float | None
    gpu_hours: float
    cost: float = Field(description="GPU-hours times the cluster's price per GPU-hour.")
    run_id: str | None
    run_url: str | None

    @classmethod
    def from_compared(cls, compared: ComparedJob) -> ComparedJobOut:
        job, tracking = compared.job, compared.tracking
        return cls(
            id=job.id,
            name=job.name,
            project=job.project_name,
            status=job.status,
            strategy=job.strategy,
            gpus=job.gpus,
            duration_seconds=compared.duration_seconds,
            gpu_hours=compared.gpu_hours,
            cost=compared.cost,
            run_id=tracking.run_id if tracking else None,
            run_url=tracking.run_url if tracking else None,
        )


class SpecDifferenceOut(BaseModel):
    field: str = Field(description="Dotted path in the spec, as --set takes it.")
    values: list[Any] = Field(description="Its value in each job, in the order of `jobs`.")


class MetricComparisonOut(BaseModel):
    name: str
    values: list[float | None] = Field(description="The last value each job reported.")


class ComparisonOut(BaseModel):
    jobs: list[ComparedJobOut]
    spec_differences: list[SpecDifferenceOut] = Field(
        description="Only the fields whose values are not the same in every job."
    )
    metrics: list[MetricComparisonOut] = Field(description="Final metrics, side by side.")

    @classmethod
    def from_comparison(cls, comparison: Comparison) -> ComparisonOut:
        return cls(
            jobs=[ComparedJobOut.from_compared(c) for c in comparison.jobs],
            spec_differences=[
                SpecDifferenceOut(field=path, values=values)
                for path, values in comparison.spec_differences.items()
            ],
            metrics=[
                MetricComparisonOut(name=name, values=values)
                for name, values in comparison.metrics.items()
            ],
        )
