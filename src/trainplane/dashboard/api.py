"""The dashboard's only way to data: the public API, called in-process over
ASGI with the visitor's token (sent as a bearer token: what the API checks is
the same as for any HTTP client)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import Request

from trainplane.api.authentication import credential_of


@dataclass
class ApiError(Exception):
    status: int
    detail: str
    errors: list[dict[str, Any]]


class DashboardApi:
    """The API as the visitor (their bearer header or sign-in cookie), or
    as ``token`` when given (checking a token before signing in with it)."""

    def __init__(self, request: Request, token: str | None = None) -> None:
        headers = {"accept": "application/json"}
        token = token or credential_of(request).secret
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
