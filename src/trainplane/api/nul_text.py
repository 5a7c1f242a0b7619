"""Refuses requests that carry a NUL character (U+0000) anywhere: in a path
parameter, a query parameter, or a string (key or value) of a JSON body.

PostgreSQL cannot store NUL in text or JSONB (SQLite can), so such a request
was stored by one backend and a 500 on the other. No name, id, label or spec
field has a use for it, so it is a 422 naming the field on both.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from trainplane.errors import InvalidInputError

NUL = "\x00"
MESSAGE = "may not contain a NUL character (\\u0000)"
BINARY_TYPES = ("application/zip", "application/octet-stream")


def _field(path: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else part


def nul_in_json(document: Any) -> str | None:
    """The dotted path of the first string in ``document`` holding a NUL, if
    any (for a key, the path of the object holding it, or ``body`` at the
    top). Iterative: a body nested as deep as JSON parsing allows must not
    exhaust the stack here."""
    pending: list[tuple[str, Any]] = [("", document)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, str):
            if NUL in value:
                return path or "body"
        elif isinstance(value, dict):
            if any(NUL in key for key in value):
                return path or "body"
            pending += [(_field(path, key), item) for key, item in reversed(value.items())]
        elif isinstance(value, list):
            pending += [(_field(path, i), item) for i, item in reversed(list(enumerate(value)))]
    return None


async def refuse_nul_text(request: Request) -> None:
    """An app-wide dependency: it runs after FastAPI has read the body, whose
    bytes it reads from the request's cache, and before any route."""
    for name, value in request.path_params.items():
        if isinstance(value, str) and NUL in value:
            raise InvalidInputError(name, MESSAGE)
    if b"%00" in request.scope.get("query_string", b""):
        for name, value in request.query_params.multi_items():
            if NUL in name or NUL in value:
                raise InvalidInputError(name.replace(NUL, "") or "query", MESSAGE)
    # Uploads (code bundles, input files) are bytes, not text; an input may
    # be gigabytes, which its route streams and must not find read here.
    binary = request.headers.get("content-type", "").lower().startswith(BINARY_TYPES)
    if request.method in ("POST", "PUT", "PATCH") and not binary:
        body = await request.body()
        # JSON can only spell NUL as this escape; look closer only then.
        if b"\\u0000" in body:
            try:
                field = nul_in_json(json.loads(body))
            except (ValueError, RecursionError):
                return  # not JSON: the route's own parsing says what is wrong
            if field:
                raise InvalidInputError(field, MESSAGE)
