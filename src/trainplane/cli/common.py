"""What every CLI verb shares: the API client, messages and exit codes.

Exit codes: 0 success (for ``submit --wait``: the job SUCCEEDED), 1 the job did
not succeed or the server refused the request, 2 bad usage or an invalid spec.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer

from trainplane.cli.client import DEFAULT_URL, ApiClient, ApiError

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


class State:
    url: str = DEFAULT_URL
    token: str | None = None

    @classmethod
    def client(cls, timeout: float = 30.0) -> ApiClient:
        return ApiClient(cls.url, cls.token, timeout=timeout)


def say(message: str) -> None:
    typer.echo(message, err=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    say(message)
    return typer.Exit(code)


def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except ApiError as exc:
        raise fail(str(exc), 2 if exc.status == 422 else 1) from None


def pages(
    client: ApiClient, path: str, params: dict[str, Any], *, all_pages: bool
) -> Iterator[dict[str, Any]]:
    """The first page of a keyset-paged list, or every page with ``all_pages``."""
    cursor = None
    while True:
        page = call(client.get, path, **params, cursor=cursor)
        yield page
        cursor = page["next_cursor"]
        if not all_pages or not cursor:
            return
