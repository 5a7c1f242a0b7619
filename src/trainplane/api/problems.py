"""The one map from exceptions to HTTP responses (RFC 9457 problem+json).

Service errors map by class; request validation errors become 422 with every
offending field named by its dotted path (``resources.gpus``), and so does a
body that cannot be decoded at all (not UTF-8, nested too deep); a database that
cannot be reached is 503 with Retry-After; anything else is a 500 that logs the
traceback and shows none of it.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException

from trainplane.errors import (
    ConflictError,
    ForbiddenError,
    InvalidInputError,
    InvalidInputsError,
    NotFoundError,
    RateLimitedError,
    ServiceError,
    UnauthenticatedError,
    UpstreamError,
)
from trainplane.jobs.spec_messages import describe

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
RETRY_AFTER_SECONDS = 5

STATUS_BY_ERROR: dict[type[ServiceError], int] = {
    UnauthenticatedError: 401,
    ForbiddenError: 403,
    NotFoundError: 404,
    ConflictError: 409,
    InvalidInputError: 422,
    RateLimitedError: 429,
    UpstreamError: 502,
}

_TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Request too large",
    415: "Unsupported media type",
    422: "Invalid request",
    429: "Too many requests",
    500: "Internal error",
    502: "Bad gateway",
    503: "Service unavailable",
}


class FieldError(BaseModel):
    field: str
    message: str
    type: str


class Problem(BaseModel):
    """An error response, as application/problem+json."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[FieldError] | None = None


def problem(
    status: int,
    detail: str,
    *,
    errors: list[FieldError] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = Problem(title=_TITLES.get(status, "Error"), status=status, detail=detail, errors=errors)
    return JSONResponse(
        body.model_dump(exclude_none=True),
        status_code=status,
        media_type=PROBLEM_JSON,
        headers=headers,
    )


def _located(loc: tuple[Any, ...]) -> tuple[list[Any], str]:
    """The location without its source (``body``, ``query``...), and the name
    to give when nothing is left."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header"):
        source = parts.pop(0)
        return parts, "body" if source == "body" else source
    return parts, "body"


def _describe_all(errors: list[dict[str, Any]]) -> list[FieldError]:
    """Each error as a sentence that names its field (the spec's are taught
    by ``trainplane.jobs.spec_messages``), once, in the order they came."""
    described: list[FieldError] = []
    by_source: dict[str, list[dict[str, Any]]] = {}
    for error in errors:
        if error["type"] == "json_invalid":
            position = error["loc"][-1] if len(error["loc"]) > 1 else "?"
            reason = error.get("ctx", {}).get("error", "malformed")
            message = f"invalid JSON at character {position}: {reason}"
            described.append(FieldError(field="body", message=message, type="json_invalid"))
            continue
        parts, source = _located(tuple(error["loc"]))
        by_source.setdefault(source, []).append({**error, "loc": tuple(parts)})
    for source, located in by_source.items():
        described += [
            FieldError(field=said.path or source, message=said.message, type=said.type)
            for said in describe(located)
        ]
    return described


def unparsable_body(cause: BaseException) -> JSONResponse:
    """A 422 naming the body, for one that ``cause`` kept from being decoded."""
    if isinstance(cause, UnicodeDecodeError):
        message = "the body is not UTF-8 text"
    else:
        message = f"the body could not be parsed as JSON ({type(cause).__name__})"
    return problem(
        422,
        f"body: {message}",
        errors=[FieldError(field="body", message=message, type="json_invalid")],
    )


def validation_problem(errors: list[dict[str, Any]]) -> JSONResponse:
    described = _describe_all(errors)
    detail = "; ".join(e.message for e in described[:5])
    if len(described) > 5:
        detail += f"; and {len(described) - 5} more"
    return problem(422, detail, errors=described)


def domain_problem(exc: ServiceError) -> JSONResponse:
    status = next((code for cls, code in STATUS_BY_ERROR.items() if isinstance(exc, cls)), 500)
    if isinstance(exc, InvalidInputsError):
        errors = [FieldError(field=f, message=m, type="invalid") for f, m in exc.problems]
        return problem(status, exc.detail, errors=errors)
    if isinstance(exc, InvalidInputError):
        return problem(
            status,
            exc.detail,
            errors=[FieldError(field=exc.field, message=exc.message, type="invalid")],
        )
    if isinstance(exc, UnauthenticatedError):
        return problem(status, exc.detail, headers={"WWW-Authenticate": "Bearer"})
    if isinstance(exc, RateLimitedError):
        return problem(status, exc.detail, headers={"Retry-After": str(exc.retry_after_seconds)})
    return problem(status, exc.detail)


def database_unavailable(exc: Exception) -> JSONResponse:
    log.warning("database unavailable: %s", exc)
    return problem(
        503,
        "the database is unavailable; retry shortly",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def response_for(exc: Exception) -> JSONResponse | None:
    """The answer to ``exc`` raised outside the routes (in a middleware, where
    the exception handlers below do not reach); None for a real failure."""
    if isinstance(exc, ServiceError):
        return domain_problem(exc)
    if isinstance(exc, OperationalError | PoolTimeoutError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    ):
        return database_unavailable(exc)
    return None


def install(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _domain(_: Request, exc: ServiceError) -> JSONResponse:
        return domain_problem(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_problem(list(exc.errors()))

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.__cause__ is not None:
            # FastAPI's answer to a JSON body it could not decode at all (not
            # UTF-8, nested too deep): bad input like malformed JSON, so 422.
            return unparsable_body(exc.__cause__)
        return problem(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(OperationalError)
    @app.exception_handler(PoolTimeoutError)
    async def _database_down(_: Request, exc: Exception) -> JSONResponse:
        return database_unavailable(exc)

    @app.exception_handler(DBAPIError)
    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, DBAPIError) and exc.connection_invalidated:
            return await _database_down(request, exc)
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(500, "internal error; the server log has the details")


def problem_response(description: str) -> dict[str, Any]:
    """One problem+json response for a route's OpenAPI ``responses``."""
    return {"model": Problem, "content": {PROBLEM_JSON: {}}, "description": description}


PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: problem_response(title)
    for code, title in (
        # Every route of the routers that use these needs a token once the
        # installation has one, and checks the caller's role.
        (401, "Missing, unknown, expired or revoked token"),
        (403, "The token's role does not allow this"),
        (404, "Not found"),
        (409, "Conflict"),
        (422, "Invalid request"),
        (503, "Database unavailable"),
    )
}

# For routes that take a body: BodySizeLimit (app.py) refuses one over its
# limit before any route sees it, so no route can declare it on its own.
BODY_RESPONSES: dict[int | str, dict[str, Any]] = {
    413: problem_response("Request body over the size limit")
}
