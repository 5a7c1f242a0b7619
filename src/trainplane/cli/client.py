"""A small HTTP client for the API that turns problem+json into readable errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"


def field_errors(errors: list[dict[str, Any]] | None) -> list[tuple[str, str]]:
    """(field, message) of each entry of a problem's ``errors``: trainplane
    writes ``field``/``message``; plain FastAPI and pydantic write ``loc``/``msg``."""
    described = []
    for error in errors or []:
        if not isinstance(error, dict):
            continue
        field = error.get("field")
        if field is None and isinstance(error.get("loc"), list):
            field = ".".join(str(part) for part in error["loc"] if part != "body")
        message = error.get("message", error.get("msg", ""))
        described.append((str(field or "body"), str(message)))
    return described


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
        described = field_errors(self.errors)
        # The detail already names the first field; list them when there are more.
        if len(described) > 1 or (described and described[0][0] not in detail):
            lines += [f"  {field}: {message}" for field, message in described]
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
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise ApiError(
                response.status_code, response.text.strip() or response.reason_phrase
            ) from None
        detail = body.get("detail", response.text)
        if not isinstance(detail, str):  # FastAPI's own 422 puts the error list here
            body = {**body, "errors": body.get("errors") or detail}
            detail = "; ".join(f"{f}: {m}" for f, m in field_errors(body["errors"])) or str(detail)
        raise ApiError(response.status_code, detail, body.get("errors"), body)

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
