"""Headers that tell browsers how to treat every answer of this server:
no framing (clickjacking), no scripts, styles or objects from anywhere but
here, no referrer leaking a job's address, no content sniffing.

The dashboard's pages keep to the policy: no inline scripts, styles or
event handlers; everything comes from ``/static``. FastAPI's own API
explorers (``/docs``, ``/redoc``) load their scripts from a CDN and inline,
so they get only the parts of the policy they survive.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        # The pages' favicon is an empty data: URL (no request for it).
        "img-src 'self' data:",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "object-src 'none'",
    )
)
API_EXPLORER_POLICY = "frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
API_EXPLORERS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc"})

SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Only HTTP answers start with http.response.start; other scopes pass as they are.
        explorer = scope.get("path") in API_EXPLORERS
        policy = API_EXPLORER_POLICY if explorer else CONTENT_SECURITY_POLICY

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("Content-Security-Policy", policy)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, with_headers)
