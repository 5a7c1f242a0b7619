"""The one HTTP client of the API, under ``Client``, ``AsyncClient``, the CLI
and the dashboard: a base URL and a token in, requests out; a server that
does not answer is ``ConnectionFailed``, a refusal the ``TrainplaneError`` of
its status (``errors.error_for``). What to show for one is each caller's
choice: the SDK raises it, the CLI prints it, the dashboard renders it.

A session reads nothing from the environment: ``transport.connection`` does
that for the SDK, the CLI's options for the CLI, and the dashboard passes the
visitor's own token (never the server process's)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import httpx

from trainplane import __version__
from trainplane.sdk.errors import ConnectionFailed, error_for
from trainplane.sdk.transport import DEFAULT_TIMEOUT, Call

T = TypeVar("T")


def _headers(agent: str, token: str | None, extra: dict[str, str] | None) -> dict[str, str]:
    headers = {"User-Agent": f"{agent}/{__version__}", **(extra or {})}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _present(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def _body(response: httpx.Response) -> Any:
    return response.json() if response.content else None


class _Connected:
    """The API at ``url`` as ``token`` (None: anonymous). ``transport``
    replaces the network: the dashboard calls the API in its own process
    (``httpx.ASGITransport``)."""

    _client: Any = httpx.Client

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        agent: str = "trainplane-sdk",
        headers: dict[str, str] | None = None,
        transport: Any = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._http = self._client(
            base_url=self.url,
            headers=_headers(agent, token, headers),
            timeout=timeout,
            transport=transport,
        )


class Session(_Connected):
    """The API, request by request."""

    def close(self) -> None:
        self._http.close()

    def answer(self, **request: Any) -> httpx.Response:
        """The response, whatever its status (``request``: httpx's arguments)."""
        try:
            return self._http.request(**request)
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.url, exc) from exc

    def run(self, call: Call[T]) -> T:
        """A prepared call's answer, as its model."""
        return call.decode(self.answer(**call.request()))

    def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The successful response; anything else raises."""
        response = self.answer(method=method, url=path, **kwargs)
        if not response.is_success:
            raise error_for(response)
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """The successful response's JSON body (None if it has none)."""
        return _body(self.send(method, path, **kwargs))

    def get(self, path: str, **params: Any) -> Any:
        return self.json("GET", path, params=_present(params))

    def post(self, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        return self.json("POST", path, json=body, headers=headers or {})

    def text(self, path: str, **params: Any) -> str:
        return self.send("GET", path, params=_present(params)).text

    @contextmanager
    def lines(self, *, timeout: httpx.Timeout, **request: Any) -> Iterator[Iterator[str]]:
        """The response's lines, read as they arrive (a followed log)."""
        try:
            with self._http.stream(**request, timeout=timeout) as response:
                if not response.is_success:
                    response.read()
                    raise error_for(response)
                yield response.iter_lines()
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.url, exc) from exc


class AsyncSession(_Connected):
    """As ``Session``, with ``await``."""

    _client = httpx.AsyncClient

    async def close(self) -> None:
        await self._http.aclose()

    async def answer(self, **request: Any) -> httpx.Response:
        try:
            return await self._http.request(**request)
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.url, exc) from exc

    async def run(self, call: Call[T]) -> T:
        request = call.request()
        if call.stream is not None:
            request["content"] = async_chunks(call.stream)
        return call.decode(await self.answer(**request))

    async def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """The successful response's JSON body; anything else raises."""
        response = await self.answer(method="GET", url=path, params=params)
        if not response.is_success:
            raise error_for(response)
        return _body(response)

    @asynccontextmanager
    async def lines(
        self, *, timeout: httpx.Timeout, **request: Any
    ) -> AsyncIterator[AsyncIterator[str]]:
        try:
            async with self._http.stream(**request, timeout=timeout) as response:
                if not response.is_success:
                    await response.aread()
                    raise error_for(response)
                yield response.aiter_lines()
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.url, exc) from exc


async def async_chunks(make: Callable[[], Iterator[bytes]]) -> Any:
    """A streamed body for an async client: each chunk read in a thread."""
    chunks = make()
    end = object()
    while (chunk := await asyncio.to_thread(next, chunks, end)) is not end:
        yield chunk
