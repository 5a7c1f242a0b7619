"""A small HTTP client for the API that turns problem+json into readable errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from trainplane.sdk.errors import field_errors, field_lines, problem_of
from trainplane.sdk.transport import DEFAULT_URL

# DEFAULT_URL is the SDK's, so the CLI and trainplane.Client agree on it.
__all__ = ["DEFAULT_URL", "ApiClient", "ApiError"]


class ApiError(Exception):
    """The server refused a request (``status`` 0: it did not answer);
    ``str()`` is what to show the user, ``body`` the problem as sent."""

    def __init__(
        self,
        status: int,
        detail: str,
        errors: list[dict[str, Any]] | None = None,
        body: dict[str, Any] | None = None,
    ):
        self.status = status
        self.detail = detail
        self.errors = errors or []
        self.body = body
        lines = [f"error {status}: {detail}" if status else f"error: {detail}"]
        lines += field_lines(detail, field_errors(self.errors))
        super().__init__("\n".join(lines))


class ApiClient:
    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The successful response; anything else raises ApiError."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiError(0, f"cannot reach trainplane at {self.url}: {exc}") from None
        if not response.is_success:
            self._raise(response)
        return response

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.send(method, path, **kwargs)
        return response.json() if response.content else None

    @staticmethod
    def _raise(response: httpx.Response) -> None:
        problem = problem_of(response)
        raise ApiError(problem.status, problem.detail, problem.errors, problem.body) from None

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
        return self.send(
            "GET", path, params={k: v for k, v in params.items() if v is not None}
        ).text

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        return self.request("POST", path, json=body, headers=headers or {})

    def close(self) -> None:
        self._http.close()
