"""The dashboard's sign-in cookie: the visitor's API token, HttpOnly (no
script, so no injected script, can read it), SameSite=Strict (no other site
makes the browser send it), Secure when the dashboard was reached over HTTPS.

The API takes it as a credential too (``trainplane.api.authentication``),
for the dashboard's own scripts, which can no longer see the token to send
it; changes made that way need the dashboard's header and origin.
"""

from __future__ import annotations

from starlette.requests import HTTPConnection
from starlette.responses import Response

from trainplane.api.authentication import TOKEN_COOKIE

# Signed in for a month at most; the token's own expiry may end it sooner.
COOKIE_MAX_AGE_SECONDS = 30 * 86_400


def set_token_cookie(response: Response, request: HTTPConnection, token: str) -> None:
    response.set_cookie(
        TOKEN_COOKIE,
        token,
        max_age=COOKIE_MAX_AGE_SECONDS,
        path="/",
        httponly=True,
        samesite="strict",
        # The scheme uvicorn saw, or a trusted proxy's X-Forwarded-Proto
        # (uvicorn trusts those of FORWARDED_ALLOW_IPS, by default 127.0.0.1).
        secure=request.url.scheme == "https",
    )


def clear_token_cookie(response: Response) -> None:
    response.delete_cookie(TOKEN_COOKIE, path="/", httponly=True, samesite="strict")
