"""ASGI middleware timing every API request by its route template (never the
raw path, whose job ids would make a label per job)."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trainplane.observability.instruments import HTTP_REQUEST_SECONDS

UNMATCHED = "unmatched"  # 404s, static files: one label for all


class RequestTimer:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed_send(message: Message) -> None:
            # The first byte is the latency a client feels; a followed log
            # stream would otherwise count as one very slow request.
            if message["type"] == "http.response.start":
                HTTP_REQUEST_SECONDS.labels(
                    scope["method"], route_of(scope), str(message["status"])
                ).observe(time.perf_counter() - started)
            await send(message)

        await self.app(scope, receive, timed_send)


def route_of(scope: Scope) -> str:
    # The router writes the matched route into the request's scope.
    route = scope.get("route")
    return getattr(route, "path", None) or UNMATCHED
