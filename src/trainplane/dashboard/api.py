"""The dashboard's only way to data: the public API, called in-process over
ASGI with the visitor's token, exactly as an HTTP client would call it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import Request

# Where a browser keeps its token for page loads (the scripts send it as a
# bearer header; pages are GET-only, so the cookie can change nothing).
TOKEN_COOKIE = "trainplane_token"


@dataclass
class ApiError(Exception):
    status: int
    detail: str
    errors: list[dict[str, Any]]


def visitor_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, credential = header.partition(" ")
    if scheme.lower() == "bearer" and credential.strip():
        return credential.strip()
    return request.cookies.get(TOKEN_COOKIE) or None


class DashboardApi:
    def __init__(self, request: Request) -> None:
        headers = {"accept": "application/json"}
        token = visitor_token(request)
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=request.app),
            base_url="http://api.internal",
            headers=headers,
            timeout=30.0,
        )

    async def __aenter__(self) -> DashboardApi:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._client.aclose()

    async def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        response = await self._client.get(path, params=_without_empty(params))
        if response.status_code >= 400:
            raise _error(response)
        return response.json()

    async def get_or_error(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """The body, or the ApiError, for parts of a page that may fail alone."""
        try:
            return await self.get(path, params)
        except ApiError as error:
            return error

    async def gather(self, *calls: Any) -> list[Any]:
        return list(await asyncio.gather(*calls))


def _without_empty(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if params is None:
        return None
    return {k: v for k, v in params.items() if v not in (None, "", [])}


def _error(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    return ApiError(
        status=response.status_code,
        detail=str(body.get("detail") or response.reason_phrase),
        errors=list(body.get("errors") or []),
    )
