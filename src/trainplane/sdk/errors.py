"""What the SDK raises: the server's problem details (RFC 9457
``application/problem+json``) as exceptions, one class per status, chosen in
one table (:data:`ERROR_BY_STATUS`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from trainplane.sdk.models import JobSummary


def field_errors(errors: list[dict[str, Any]] | None) -> list[tuple[str, str]]:
    """(field, message) of each entry of a problem's ``errors``: trainplane
    writes ``field``/``message``; plain FastAPI and pydantic write ``loc``/``msg``."""
    described = []
    for error in errors or []:
        if not isinstance(error, dict):
            continue
        field = error.get("field")
        if field is None and isinstance(error.get("loc"), list):
            field = ".".join(str(part) for part in error["loc"] if part != "body")
        message = error.get("message", error.get("msg", ""))
        described.append((str(field or "body"), str(message)))
    return described


def field_lines(detail: str, described: list[tuple[str, str]]) -> list[str]:
    """Lines naming each field, for a message that starts with ``detail``:
    those the detail does not already say, so that each is told once."""
    if len(described) == 1 and described[0][0] in detail:
        return []  # the detail names the one field
    return [f"  {field}: {message}" for field, message in described if message not in detail]


@dataclass(frozen=True)
class Problem:
    """A refused request's problem details, read leniently: a proxy in front
    of the server may answer with plain text or HTML instead."""

    status: int
    title: str
    type: str
    detail: str
    errors: list[dict[str, Any]] | None
    body: dict[str, Any] | None


def problem_of(response: httpx.Response) -> Problem:
    try:
        body = response.json()
    except ValueError:
        body = None
    status = response.status_code
    if not isinstance(body, dict):
        text = response.text.strip() or response.reason_phrase
        return Problem(status, response.reason_phrase, "about:blank", text, None, None)
    detail = body.get("detail", response.text)
    if not isinstance(detail, str):  # FastAPI's own 422 puts the error list here
        body = {**body, "errors": body.get("errors") or detail}
        detail = "; ".join(f"{f}: {m}" for f, m in field_errors(body["errors"])) or str(detail)
    return Problem(
        status,
        str(body.get("title") or response.reason_phrase),
        str(body.get("type") or "about:blank"),
        detail,
        body.get("errors"),
        body,
    )


@dataclass(frozen=True)
class InvalidField:
    """One offending field of a refused request, by its dotted path (``resources.gpus``)."""

    field: str
    message: str


class TrainplaneError(Exception):
    """The server refused a request (or, ``status`` 0, could not be reached).

    ``detail`` is the server's explanation, ``errors`` the fields it names,
    ``body`` the problem document as sent and ``headers`` the response's."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        title: str = "",
        type: str = "about:blank",
        errors: list[dict[str, Any]] | None = None,
        body: dict[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self.detail = detail
        self.title = title
        self.type = type
        self.errors = [InvalidField(f, m) for f, m in field_errors(errors)]
        self.body = body
        self.headers = dict(headers or {})
        lines = [f"{status} {title}: {detail}" if status else detail]
        lines += field_lines(detail, [(e.field, e.message) for e in self.errors])
        super().__init__("\n".join(lines))

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked to wait before retrying (429, 503), if it said."""
        value = {k.lower(): v for k, v in self.headers.items()}.get("retry-after", "")
        try:
            return float(value)
        except ValueError:
            return None  # absent, or an HTTP date: no number to give


class ConnectionFailed(TrainplaneError):
    """The server did not answer (wrong URL, not running), or the connection
    broke off mid-answer."""

    def __init__(self, url: str, cause: Exception | str) -> None:
        if isinstance(cause, str):
            super().__init__(0, f"{cause} (trainplane at {url})")
        else:
            super().__init__(0, f"cannot reach trainplane at {url}: {cause}")


class Unauthorized(TrainplaneError):
    """401: no token, or an unknown, expired or revoked one."""


class Forbidden(TrainplaneError):
    """403: the token's role does not allow this."""


class NotFound(TrainplaneError):
    """404."""


class Conflict(TrainplaneError):
    """409: e.g. an Idempotency-Key reused with another spec, or a name taken."""


class PayloadTooLarge(TrainplaneError):
    """413: the request body is over the server's limit."""


class InvalidRequest(TrainplaneError):
    """422: ``errors`` names each offending field by its dotted path."""


class RateLimited(TrainplaneError):
    """429: retry after ``retry_after`` seconds."""


class ServerError(TrainplaneError):
    """5xx: the server failed; its log has the details."""


class Unavailable(ServerError):
    """503: e.g. the database is down; retry after ``retry_after`` seconds."""


ERROR_BY_STATUS: dict[int, type[TrainplaneError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidRequest,
    429: RateLimited,
    503: Unavailable,
}


def error_for(response: httpx.Response) -> TrainplaneError:
    """The exception for a response that is not a success."""
    status = response.status_code
    default = ServerError if status >= 500 else TrainplaneError
    problem = problem_of(response)
    return ERROR_BY_STATUS.get(status, default)(
        status,
        problem.detail,
        title=problem.title,
        type=problem.type,
        errors=problem.errors,
        body=problem.body,
        headers=response.headers,
    )


class JobFailed(Exception):
    """``Job.raise_for_status()`` on a job that ended FAILED or CANCELLED."""

    def __init__(self, job: JobSummary) -> None:
        self.job = job
        super().__init__(f"job {job.id} {job.status}: {job.reason}")


class WaitTimeout(TimeoutError):
    """``wait()`` gave up before the job ended; ``job`` is the last one seen."""

    def __init__(self, job: JobSummary, timeout: float) -> None:
        self.job = job
        self.timeout = timeout
        super().__init__(f"job {job.id} still {job.status} after {timeout:g}s: {job.reason}")
