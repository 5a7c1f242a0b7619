"""What a function job's ranks report when the train function ends: rank 0's
return value, or a rank's exception. Shared by the runtime that sends it, the
API that checks it and the SDK that reads it back."""

from __future__ import annotations

import base64
import binascii
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# A return value is for results (a loss, a small dict, a path), not for data:
# bigger ones belong in storage, with their location returned.
MAX_RESULT_BYTES = 16 << 20
MAX_REPR_CHARS = 2000
MAX_TRACEBACK_CHARS = 64_000
# The base64 of the largest value, plus the rest of the report.
MAX_REPORT_BYTES = MAX_RESULT_BYTES * 4 // 3 + (256 << 10)


class RemoteError(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: str = Field(min_length=1, max_length=255, description="The exception's class.")
    message: str = Field(max_length=MAX_TRACEBACK_CHARS)
    traceback: str = Field(max_length=MAX_TRACEBACK_CHARS)


class ResultReport(BaseModel):
    """``outcome: returned`` carries ``value`` (base64 of a cloudpickle);
    ``outcome: raised`` carries ``error``."""

    model_config = ConfigDict(extra="forbid")

    outcome: Literal["returned", "raised"]
    rank: int = Field(ge=0, le=1_000_000)
    value: str | None = Field(default=None, description="base64 of the pickled return value.")
    value_repr: str = Field(default="", max_length=MAX_REPR_CHARS)
    error: RemoteError | None = None

    @field_validator("value")
    @classmethod
    def _base64(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            size = len(base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            raise ValueError("must be base64") from None
        if size > MAX_RESULT_BYTES:
            raise ValueError(f"{size} bytes, over the {MAX_RESULT_BYTES} byte limit")
        return value

    @model_validator(mode="after")
    def _one_outcome(self) -> ResultReport:
        if self.outcome == "returned" and (self.value is None or self.error is not None):
            raise ValueError("outcome returned carries a value and no error")
        if self.outcome == "raised" and (self.error is None or self.value is not None):
            raise ValueError("outcome raised carries an error and no value")
        return self

    def value_bytes(self) -> bytes | None:
        return None if self.value is None else base64.b64decode(self.value)
