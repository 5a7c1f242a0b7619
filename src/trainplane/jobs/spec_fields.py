"""Field types and validators the job spec's models share: names, storage
locations, durations, free-form JSON objects, and the strict base model.
Their rules are the spec's (``trainplane.jobs.spec``); they live here so the
models read as the spec's sections."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)
from pydantic_core import PydanticCustomError

from trainplane.jobs.durations import format_duration, parse_duration

ProjectName = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?$"),
    Field(description="Lowercase letters, digits, '-' and '_'; 1-63 characters."),
]
JobName = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?$"),
    Field(description="Letters, digits, '.', '-' and '_'; 1-128 characters."),
]
ModelName = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9](?:[A-Za-z0-9._/-]{0,254}[A-Za-z0-9])?$"),
    Field(description="Letters, digits, '.', '_', '-' and '/'; 1-256 characters."),
]
NonEmptyStr = Annotated[str, StringConstraints(min_length=1, max_length=4096)]
ShortStr = Annotated[str, StringConstraints(min_length=1, max_length=256)]

_S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](?:/[^\s]*)?$")


def storage_uri(value: str) -> str:
    """A checkpoint location: ``s3://bucket/prefix`` or an absolute path."""
    if value.startswith("s3://"):
        if not _S3_URI.fullmatch(value):
            raise PydanticCustomError(
                "storage_uri",
                "'{value}' is not a valid s3:// URI (s3://bucket/prefix)",
                {"value": value},
            )
        return value.rstrip("/")
    if "://" in value:
        raise PydanticCustomError(
            "storage_uri",
            "unsupported scheme in '{value}': use s3:// or an absolute path",
            {"value": value},
        )
    if not value.startswith("/"):
        raise PydanticCustomError(
            "storage_uri",
            "'{value}' must be an absolute path or an s3:// URI",
            {"value": value},
        )
    return value.rstrip("/") or "/"


def location(value: str) -> str:
    """A model or dataset location: ``s3://...`` or a path (relative paths are
    resolved against the spec file's folder by the client that reads the file)."""
    if "://" in value and not value.startswith("s3://"):
        raise PydanticCustomError(
            "location",
            "unsupported scheme in '{value}': use s3:// or a file path",
            {"value": value},
        )
    if value.startswith("s3://") and not _S3_URI.fullmatch(value):
        raise PydanticCustomError(
            "location", "'{value}' is not a valid s3:// URI", {"value": value}
        )
    return value


# A job's limits are stored as 32-bit seconds (jobs.max_runtime_seconds): a
# year is past any sensible limit and well inside what that column holds.
MAX_DURATION_SECONDS = 366 * 86_400


def _duration(value: Any) -> Any:
    """``24h`` style strings, or a bare number of seconds; normalised to ``1d2h``."""
    if isinstance(value, bool):
        return value  # let the str type reject it
    if isinstance(value, int) and value > 0:
        seconds = value
    elif isinstance(value, str):
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            raise PydanticCustomError("duration", str(exc)) from None
    else:
        return value
    if seconds > MAX_DURATION_SECONDS:
        raise PydanticCustomError(
            "duration",
            "must be at most {limit} ({seconds} seconds given)",
            {"limit": format_duration(MAX_DURATION_SECONDS), "seconds": seconds},
        )
    return format_duration(seconds)


def _finite_numbers(value: dict[str, Any]) -> dict[str, Any]:
    """Refuses NaN and infinities anywhere in a free-form object: JSON cannot
    spell them, so the stored spec could not hold them as given. Iterative,
    so that an object nested as deep as JSON parsing allows cannot exhaust
    the stack."""
    pending: list[Any] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise PydanticCustomError(
                "finite_number",
                "{number} cannot be stored: numbers must be finite",
                {"number": item},
            )
        if isinstance(item, dict):
            pending += item.values()
        elif isinstance(item, list):
            pending += item
    return value


StorageUri = Annotated[str, StringConstraints(min_length=1, max_length=1024)]
Duration = Annotated[str, BeforeValidator(_duration)]
JsonObject = Annotated[dict[str, Any], AfterValidator(_finite_numbers)]


class SpecError(ValueError):
    """A spec handed to a process does not parse; the message names each
    field at fault (``resources.gpus: ...``)."""


class Strict(BaseModel):
    """Base for every spec model: unknown fields are errors, not silently dropped."""

    # Numbers must be finite: a stored spec is JSON, which has no NaN or infinity.
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, allow_inf_nan=False)
