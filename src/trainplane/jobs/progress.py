"""The progress report an attempt's runtime posts to the control plane: the
current step, a batch of metric points, and the restarts Ray Train made in
place (they spend the job's restart budget like a failed attempt does). Strict
and bounded, so a runaway client is refused with the field named instead of
filling the database."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_POINTS = 1000
MAX_METRICS = 64
# Steps and step counts are stored as 32-bit integers.
MAX_STEP = 2**31 - 1
# Point times are unix seconds; the bound keeps them inside what a datetime holds.
MAX_TIME = 32_503_680_000.0  # year 3000
MAX_RESTART_EVENTS = 16
# More than any budget allows (retries.max_restarts is at most 100).
MAX_IN_PLACE_RESTARTS = 1000
MAX_RESTART_ERROR = 500

MetricName = Annotated[str, Field(min_length=1, max_length=128)]
MetricValue = Annotated[float, Field(allow_inf_nan=False)]
Step = Annotated[int, Field(ge=0, le=MAX_STEP)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class MetricPoint(_Strict):
    step: Step
    time: float = Field(ge=0, le=MAX_TIME, description="When it was measured, unix seconds.")
    metrics: dict[MetricName, MetricValue] = Field(max_length=MAX_METRICS)


class InPlaceRestart(_Strict):
    """Ray Train restarted the attempt's worker group after a worker failed
    (``worker_group``), or tried placing it again after the cluster could not
    (``placement``)."""

    kind: Literal["worker_group", "placement"]
    number: int = Field(
        ge=1,
        le=MAX_IN_PLACE_RESTARTS,
        description="Which of the attempt's restarts in place this is, counting from 1 "
        "(sent again, it counts once).",
    )
    error: str = Field(default="", max_length=MAX_RESTART_ERROR, description="What failed.")

    @property
    def described(self) -> str:
        """What happened, in the words of the attempt's log and the job's events."""
        return RESTART_WORDS[self.kind]


RESTART_WORDS = {
    "worker_group": "worker group restarted in place",
    "placement": "placement retried in place",
}


class ProgressReport(_Strict):
    step: Step | None = Field(
        default=None,
        description="The attempt's current step; default: the highest step of the points.",
    )
    total_steps: int | None = Field(default=None, ge=1, le=MAX_STEP)
    points: list[MetricPoint] = Field(default_factory=list, max_length=MAX_POINTS)
    restarts: list[InPlaceRestart] = Field(default_factory=list, max_length=MAX_RESTART_EVENTS)

    @property
    def current_step(self) -> int | None:
        if self.step is not None:
            return self.step
        return max((point.step for point in self.points), default=None)
