"""The dashboard's only way to data: the public API, called in-process over
ASGI with the visitor's token (sent as a bearer token: what the API checks is
the same as for any HTTP client), through the SDK's session, so a refusal is
the SDK's ``TrainplaneError`` of its status, as any client sees it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import httpx
from fastapi import Request

from trainplane.api.authentication import credential_of
from trainplane.sdk.errors import TrainplaneError
from trainplane.sdk.sessions import AsyncSession


class DashboardApi:
    """The API as the visitor (their bearer header or sign-in cookie), or
    as ``token`` when given (checking a token before signing in with it)."""

    def __init__(self, request: Request, token: str | None = None) -> None:
        self._session = AsyncSession(
            "http://api.internal",
            token or credential_of(request).secret,
            timeout=30.0,
            agent="trainplane-dashboard",
            headers={"accept": "application/json"},
            transport=httpx.ASGITransport(app=request.app),
        )

    async def __aenter__(self) -> DashboardApi:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._session.close()

    async def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return await self._session.get(path, _without_empty(params))

    async def get_or_error(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """The body, or the TrainplaneError, for parts of a page that may fail alone."""
        try:
            return await self.get(path, params)
        except TrainplaneError as error:
            return error

    async def gather(self, *calls: Any) -> list[Any]:
        return list(await asyncio.gather(*calls))


def _without_empty(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if params is None:
        return None
    return {k: v for k, v in params.items() if v not in (None, "", [])}
