"""Liveness (``/healthz``: the process answers) and readiness (``/readyz``: the
database answers and its schema is the one this code expects)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from trainplane.api.problems import RETRY_AFTER_SECONDS
from trainplane.api.schemas.common import Health
from trainplane.db.migrate import current_revisions

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses={503: {"model": Health}})
def readyz(request: Request) -> Health | JSONResponse:
    engine = request.app.state.engine
    expected = request.app.state.schema_heads
    checks: dict[str, str] = {}
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        checks["database"] = "ok"
        current = current_revisions(engine)
        checks["schema"] = (
            "ok"
            if set(current) == set(expected)
            else f"at {','.join(current) or 'nothing'}, expected {','.join(expected)}: "
            "run `trainplane db upgrade`"
        )
    except Exception as exc:  # any failure to reach the database means not ready
        checks.setdefault("database", f"unavailable: {type(exc).__name__}")
    if all(value == "ok" for value in checks.values()) and "schema" in checks:
        return Health(status="ok", checks=checks)
    return JSONResponse(
        Health(status="unavailable", checks=checks).model_dump(),
        status_code=503,
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )
