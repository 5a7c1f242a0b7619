"""What every resource's routes share: the health body and one way to send a body."""

from __future__ import annotations

from fastapi import Response
from pydantic import BaseModel, Field


class Health(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)


def json_response(
    body: BaseModel, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """Serialise ``body`` once. Routes still declare ``response_model`` for the
    OpenAPI document; returning a Response skips FastAPI's second validation of
    a model that is already typed."""
    return Response(
        body.model_dump_json(),
        status_code=status_code,
        media_type="application/json",
        headers=headers,
    )
