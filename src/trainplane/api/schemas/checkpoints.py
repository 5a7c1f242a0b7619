"""Bodies of ``GET /v1/jobs/{id}/checkpoints``."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from trainplane.services.checkpoints import JobCheckpoints


class CheckpointOut(BaseModel):
    step: int
    uri: str
    created_at: datetime
    metrics: dict[str, float]
    strategy: str
    format: str = Field(description="How the files are laid out: state-dict, dcp, deepspeed.")
    world_size: int
    files: int
    size_bytes: int
    attempt_id: str | None


class CheckpointList(BaseModel):
    job_id: str
    storage: str = Field(description="The job's checkpoint folder.")
    checkpoints: list[CheckpointOut] = Field(description="Complete ones only, newest step first.")

    @classmethod
    def from_listing(cls, listing: JobCheckpoints) -> CheckpointList:
        return cls(
            job_id=listing.job_id,
            storage=listing.storage,
            checkpoints=[CheckpointOut(**c) for c in listing.checkpoints],
        )
