"""Bodies of a job's progress: where its latest attempt stands, its metric points,
and what the API answers the runtime's reports."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from trainplane.services.progress import MetricsPage, Progress, StopRequest


class ProgressOut(BaseModel):
    """Where the latest attempt stands, as its runtime last reported."""

    attempt: int = Field(description="The attempt's number.")
    step: int | None
    total_steps: int | None
    last_heartbeat_at: datetime | None = Field(description="Its last report of any kind.")
    last_progress_at: datetime | None = Field(description="When its step last went up.")

    @classmethod
    def from_progress(cls, progress: Progress | None) -> ProgressOut | None:
        if progress is None:
            return None
        return cls.model_validate(progress, from_attributes=True)


class MetricPointOut(BaseModel):
    id: int
    attempt: int = Field(description="The number of the attempt that reported it.")
    step: int
    time: float = Field(description="When it was measured, unix seconds (as reported).")
    metrics: dict[str, float]


class StopRequestOut(BaseModel):
    reason: str = Field(description="`preempted`: a higher-priority job needs the GPUs.")
    requested_at: datetime


class ProgressAckOut(BaseModel):
    stop: StopRequestOut | None = Field(
        description="Set when the attempt should save a checkpoint and stop now; its "
        "cluster stops it at the end of the grace period otherwise."
    )

    @classmethod
    def of(cls, stop: StopRequest | None) -> ProgressAckOut:
        if stop is None:
            return cls(stop=None)
        return cls(stop=StopRequestOut(reason=stop.reason, requested_at=stop.requested_at))


class MetricsOut(BaseModel):
    job_id: str
    progress: ProgressOut | None = Field(description="Null until the latest attempt has reported.")
    points: list[MetricPointOut] = Field(description="Oldest first.")
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null at the end."
    )

    @classmethod
    def from_page(cls, page: MetricsPage) -> MetricsOut:
        return cls(
            job_id=page.job_id,
            progress=ProgressOut.from_progress(page.progress),
            points=[
                MetricPointOut(
                    id=p.id,
                    attempt=p.attempt,
                    step=p.step,
                    time=p.recorded_at.timestamp(),
                    metrics=p.values,
                )
                for p in page.points
            ],
            next_cursor=page.next_cursor,
        )
