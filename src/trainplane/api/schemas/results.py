"""Bodies of a job's function results (``/v1/jobs/{id}/result``)."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from trainplane.jobs.results import RemoteError
from trainplane.services.results import ResultView


class JobResultOut(BaseModel):
    job_id: str
    attempt_id: str
    attempt: int
    outcome: Literal["returned", "raised"]
    rank: int = Field(description="The rank that returned (0) or raised.")
    value: str | None = Field(
        description="base64 of the cloudpickled return value; unpickle only results "
        "of code you trust."
    )
    value_bytes: int
    value_repr: str = Field(description="repr() of the value, shortened.")
    error: RemoteError | None
    created_at: datetime

    @classmethod
    def from_view(cls, view: ResultView, *, with_value: bool = True) -> JobResultOut:
        error = None
        if view.outcome == "raised":
            error = RemoteError(
                type=view.error_type or "Exception",
                message=view.error_message or "",
                traceback=view.traceback or "",
            )
        return cls(
            job_id=view.job_id,
            attempt_id=view.attempt_id,
            attempt=view.attempt,
            outcome=view.outcome,  # type: ignore[arg-type]
            rank=view.rank,
            value=base64.b64encode(view.value).decode()
            if view.value is not None and with_value
            else None,
            value_bytes=view.value_bytes,
            value_repr=view.value_repr,
            error=error,
            created_at=view.created_at,
        )


class ResultAckOut(BaseModel):
    recorded: bool = Field(description="False: an earlier exception of the attempt stands.")
