"""Bodies of a sweep's reads: its trials (``GET /v1/jobs/{id}/trials``), its
best trial and its trial counts (on the sweep's job)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from trainplane.jobs.states import JobStatus
from trainplane.services.sweeps import SweepSummary, TrialListing, TrialView


class TrialObjectiveOut(BaseModel):
    metric: str
    value: float | None


class BestTrialOut(BaseModel):
    """The succeeded trial with the best final objective value."""

    id: str
    name: str
    number: int
    parameters: dict[str, Any]
    objective: TrialObjectiveOut

    @classmethod
    def of(cls, summary: SweepSummary | None) -> BestTrialOut | None:
        if summary is None or summary.best_trial is None:
            return None
        return cls.model_validate(summary.best_trial)


class TrialCountsOut(BaseModel):
    """A sweep's trials by how they stand (running: not ended yet)."""

    running: int = 0
    succeeded: int = 0
    pruned: int = 0
    failed: int = 0

    @classmethod
    def of(cls, summary: SweepSummary | None) -> TrialCountsOut | None:
        return None if summary is None else cls(**summary.trials)


class TrialOut(BaseModel):
    id: str = Field(description="The trial's job id.")
    name: str
    number: int = Field(description="1-based, in the order the search proposed the trials.")
    status: JobStatus
    reason: str
    parameters: dict[str, Any] = Field(description="The value of each swept path.")
    objective: str = Field(description="The objective's metric.")
    last_value: float | None = Field(description="The objective's last reported value.")
    best_value: float | None
    step: int | None = Field(description="The step of the last reported value.")
    values: dict[str, float] = Field(
        description="The objective at each decision step reached, by step."
    )
    gpu_hours: float
    cost: float
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def from_view(cls, view: TrialView) -> TrialOut:
        return cls.model_validate(view, from_attributes=True)


class SweepObjectiveOut(BaseModel):
    metric: str
    mode: Literal["min", "max"]


class TrialListOut(BaseModel):
    items: list[TrialOut]
    objective: SweepObjectiveOut
    best_trial: BestTrialOut | None = Field(
        description="Null until a trial succeeded with an objective value."
    )

    @classmethod
    def from_listing(cls, listing: TrialListing) -> TrialListOut:
        return cls(
            items=[TrialOut.from_view(v) for v in listing.items],
            objective=SweepObjectiveOut.model_validate(listing.summary.objective),
            best_trial=BestTrialOut.of(listing.summary),
        )
