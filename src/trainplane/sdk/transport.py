"""What the sync and async clients share about HTTP: where to connect, each
request as a value (a ``Call``), and how a response becomes a model or an
exception. Nothing here sends anything (``sessions`` does)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from trainplane.sdk.config_file import resolve_connection, url_problem
from trainplane.sdk.errors import error_for

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = 30.0
# A followed log stays open while the job runs. The server sends a keep-alive
# at least every 15 s, so a minute of silence means the connection is dead.
STREAM_TIMEOUT = httpx.Timeout(10.0, read=60.0)


def connection(url: str | None, token: str | None) -> tuple[str, str | None]:
    """The base URL and token: the arguments, else ``TRAINPLANE_URL`` and
    ``TRAINPLANE_TOKEN``, else the config file ``trainplane login`` wrote,
    else (as the CLI does) the local admin token that ``trainplane up`` wrote,
    for a server on this machine (``config_file.resolve_connection``)."""
    base, chosen, source = resolve_connection(url, token, DEFAULT_URL)
    problem = url_problem(base, source)
    if problem is not None:
        raise ValueError(problem)
    return base, chosen


@dataclass(frozen=True)
class Operation:
    """One HTTP operation of the server, as its OpenAPI document names it.

    ``response`` is the model of its JSON body, ``str`` for a text body, or
    None for no body."""

    method: str
    path: str
    response: type[BaseModel] | type[str] | None

    def call(
        self,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        pick: Callable[[Any], Any] | None = None,
        also_ok: frozenset[int] = frozenset(),
        none_if: frozenset[int] = frozenset(),
        stream: Callable[[], Iterator[bytes]] | None = None,
        timeout: httpx.Timeout | None = None,
        **path_params: str,
    ) -> Call[Any]:
        path = self.path.format(**{k: quote(str(v), safe="") for k, v in path_params.items()})
        return Call(
            self,
            path,
            dict(params or {}),
            json,
            content,
            dict(headers or {}),
            pick,
            also_ok,
            none_if,
            stream,
            timeout,
        )


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request, ready to send, and how to read its answer: the body's
    model, then ``pick`` (e.g. a list body's items). ``also_ok`` statuses
    carry the body too (503 from ``/readyz``); ``none_if`` statuses decode
    to None (404: the server has no such thing). ``stream`` makes the body,
    in chunks, each time it is called: an upload too big to hold in memory."""

    operation: Operation
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    pick: Callable[[Any], T] | None = None
    also_ok: frozenset[int] = frozenset()
    none_if: frozenset[int] = frozenset()
    stream: Callable[[], Iterator[bytes]] | None = None
    timeout: httpx.Timeout | None = None

    def request(self) -> dict[str, Any]:
        """Keyword arguments for httpx's ``request`` and ``stream`` (of a
        sync client: a streamed body is a plain iterator)."""
        extra = {} if self.timeout is None else {"timeout": self.timeout}
        return {
            "method": self.operation.method,
            "url": self.path,
            "params": {k: v for k, v in self.params.items() if v is not None},
            "json": self.json,
            "content": self.stream() if self.stream is not None else self.content,
            "headers": self.headers,
            **extra,
        }

    def decode(self, response: httpx.Response) -> T:
        """The answer as the operation's model; a refusal raises its error."""
        if response.status_code in self.none_if:
            return None  # type: ignore[return-value]
        if not response.is_success and response.status_code not in self.also_ok:
            raise error_for(response)
        kind = self.operation.response
        if kind is None:
            body: Any = None
        elif kind is str:
            body = response.text
        else:
            body = kind.model_validate_json(response.content)  # type: ignore[union-attr]
        return self.pick(body) if self.pick else body

    def next(self, page: Any) -> Call[T] | None:
        """The call for the page after ``page``; None after the last one."""
        params = page.next_params()
        return None if params is None else replace(self, params={**self.params, **params})
