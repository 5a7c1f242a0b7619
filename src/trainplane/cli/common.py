"""What every CLI verb shares: the API session (the SDK's), messages and exit codes.

Exit codes, the same for every verb (stable: CI pipelines branch on them)::

      0  success; for submit --wait: the job SUCCEEDED and every --fail-on gate passed
      1  the job FAILED, or the server refused the request (not found, conflict, ...)
      2  bad usage or an invalid spec (the message names the field); nothing was submitted
      3  the job was CANCELLED
      4  the job SUCCEEDED but a --fail-on gate failed (or its metric was never reported)
      5  gave up waiting after --timeout; the job goes on
      6  the server could not be reached or was unavailable (connection refused, 502,
         503, 504); a job already submitted goes on: rerun the step (same
         idempotency key) to find it and wait again
    130  interrupted (Ctrl-C) while waiting; the job goes on

Every code path exits with one of the ``EXIT_*`` constants below; ``EXIT_CODES``
is the table the help text, the README and ``--output json`` show.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer

from trainplane.sdk.errors import TrainplaneError, field_lines
from trainplane.sdk.sessions import Session
from trainplane.sdk.transport import DEFAULT_URL

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CANCELLED = 3
EXIT_THRESHOLD = 4
EXIT_TIMEOUT = 5
EXIT_UNREACHABLE = 6
EXIT_INTERRUPTED = 130

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "succeeded (and every --fail-on gate passed)",
    EXIT_FAILED: "the job failed, or the server refused the request",
    EXIT_USAGE: "bad usage or an invalid spec; nothing was submitted",
    EXIT_CANCELLED: "the job was cancelled",
    EXIT_THRESHOLD: "the job succeeded but a --fail-on gate failed",
    EXIT_TIMEOUT: "gave up waiting after --timeout; the job goes on",
    EXIT_UNREACHABLE: "the server could not be reached or was unavailable",
    EXIT_INTERRUPTED: "interrupted while waiting; the job goes on",
}

# HTTP statuses that say "the request itself is wrong": nothing was done.
USAGE_STATUSES = {400, 413, 415, 422}
# Statuses (0: no answer at all) that say "try again later".
UNAVAILABLE_STATUSES = {0, 502, 503, 504}


def exit_code_table(indent: str = "") -> str:
    return "\n".join(f"{indent}{code:>3}  {meaning}" for code, meaning in EXIT_CODES.items())


def refusal(error: TrainplaneError) -> str:
    """What to print for a refused request (``status`` 0: no answer at all)."""
    status, detail = error.status, error.detail
    lines = [f"error {status}: {detail}" if status else f"error: {detail}"]
    lines += field_lines(detail, [(e.field, e.message) for e in error.errors])
    return "\n".join(lines)


def sent_errors(error: TrainplaneError) -> list[dict[str, Any]]:
    """The problem's ``errors`` as the server sent them, for ``--output json``."""
    return list((error.body or {}).get("errors") or [])


def exit_code_for(error: TrainplaneError) -> int:
    if error.status in USAGE_STATUSES:
        return EXIT_USAGE
    if error.status in UNAVAILABLE_STATUSES:
        return EXIT_UNREACHABLE
    return EXIT_FAILED


def exit_code_for_status(status: str) -> int:
    """How a job's final status ends a command that waited for it."""
    return {"SUCCEEDED": EXIT_OK, "CANCELLED": EXIT_CANCELLED}.get(status, EXIT_FAILED)


class State:
    url: str = DEFAULT_URL
    token: str | None = None  # what is sent: the given one, or the local one
    given_token: str | None = None  # --token / TRAINPLANE_TOKEN as given

    @classmethod
    def client(cls, timeout: float = 30.0) -> Session:
        return Session(cls.url, cls.token, timeout=timeout, agent="trainplane-cli")


def say(message: str) -> None:
    typer.echo(message, err=True)


def fail(message: str, code: int = EXIT_FAILED) -> typer.Exit:
    say(message)
    return typer.Exit(code)


def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except TrainplaneError as exc:
        raise fail(refusal(exc), exit_code_for(exc)) from None


def pages(
    client: Session, path: str, params: dict[str, Any], *, all_pages: bool
) -> Iterator[dict[str, Any]]:
    """The first page of a keyset-paged list, or every page with ``all_pages``."""
    cursor = None
    while True:
        page = call(client.get, path, **params, cursor=cursor)
        yield page
        cursor = page["next_cursor"]
        if not all_pages or not cursor:
            return
