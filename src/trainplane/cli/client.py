"""A small HTTP client for the API that turns problem+json into readable errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"


class ApiError(Exception):
    """The server refused a request; ``str()`` is what to show the user."""

    def __init__(self, status: int, detail: str, errors: list[dict[str, Any]] | None = None):
        self.status = status
        self.detail = detail
        self.errors = errors or []
        lines = [f"error {status}: {detail}"]
        if len(self.errors) > 1:
            lines += [f"  {e.get('field')}: {e.get('message')}" for e in self.errors]
        super().__init__("\n".join(lines))


class ApiClient:
    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiError(0, f"cannot reach trainplane at {self.url}: {exc}") from None
        if response.is_success:
            return response.json() if response.content else None
        self._raise(response)

    @staticmethod
    def _raise(response: httpx.Response) -> None:
        try:
            body = response.json()
        except ValueError:
            raise ApiError(
                response.status_code, response.text.strip() or response.reason_phrase
            ) from None
        raise ApiError(response.status_code, body.get("detail", response.text), body.get("errors"))

    @contextmanager
    def stream(self, method: str, path: str, **kwargs: Any) -> Iterator[Iterator[str]]:
        """The response's lines, read as they arrive, with no read timeout."""
        try:
            with self._http.stream(
                method, path, timeout=httpx.Timeout(10.0, read=None), **kwargs
            ) as response:
                if not response.is_success:
                    response.read()
                    self._raise(response)
                yield response.iter_lines()
        except httpx.TransportError as exc:
            raise ApiError(0, f"cannot reach trainplane at {self.url}: {exc}") from None

    def text(self, path: str, **params: Any) -> str:
        try:
            response = self._http.get(
                path, params={k: v for k, v in params.items() if v is not None}
            )
        except httpx.TransportError as exc:
            raise ApiError(0, f"cannot reach trainplane at {self.url}: {exc}") from None
        if not response.is_success:
            self._raise(response)
        return response.text

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        return self.request("POST", path, json=body, headers=headers or {})

    def close(self) -> None:
        self._http.close()
