"""Authentication of API requests, before anything reads their body.

FastAPI reads and parses a request's body before any dependency runs, so a
caller checked in a dependency is checked too late: an anonymous client could
make the server parse a megabyte of YAML or JSON first. :class:`Authentication`
is an ASGI middleware in front of the routes that turns the credential of
every ``/v1/...`` request into a :class:`Caller` (the lookup off the event
loop), answers 401 without reading the body when that fails, and hands the
caller on in the request's scope, where ``deps.get_caller`` picks it up.

The runtime's routes under ``/v1/jobs/{id}/attempts/{aid}/`` are not API-token
routes: they check their attempt token themselves.

The credential is ``Authorization: Bearer <token>``, or else the dashboard's
HttpOnly cookie. A cookie is sent by the browser on its own, so a request it
authenticates may change something only when it carries the dashboard's
header and comes from this server's own origin: a form or script on another
site can do neither (CSRF).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from anyio import to_thread
from sqlalchemy.orm import Session, sessionmaker
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from trainplane.api import problems
from trainplane.services import tokens
from trainplane.services.access import Caller

API_PREFIX = "/v1/"
# Runtimes report on their attempt with the attempt's own token.
ATTEMPT_ROUTES = re.compile(r"^/v1/jobs/[^/]+/attempts/[^/]+(/|$)")
# Where a browser signed in to the dashboard keeps its token (HttpOnly).
TOKEN_COOKIE = "trainplane_token"
# What the dashboard's scripts send with every change they ask for.
DASHBOARD_HEADER = "X-Trainplane-Dashboard"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_CALLER = "trainplane_caller"


@dataclass(frozen=True)
class Credential:
    secret: str | None
    from_cookie: bool = False


def bearer_secret(connection: HTTPConnection) -> str | None:
    scheme, _, secret = connection.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and secret.strip():
        return secret.strip()
    return None


def credential_of(connection: HTTPConnection) -> Credential:
    """The bearer token when there is one, else the dashboard's cookie."""
    secret = bearer_secret(connection)
    if secret is not None:
        return Credential(secret)
    cookie = connection.cookies.get(TOKEN_COOKIE)
    return Credential(cookie, from_cookie=True) if cookie else Credential(None)


def same_origin(connection: HTTPConnection) -> bool:
    """Whether the browser says the request comes from a page of this server.

    ``Sec-Fetch-Site`` first: the browser sets it itself, and it is not
    blanked by ``Referrer-Policy: no-referrer``, under which browsers send
    ``Origin: null`` even for their own form posts. Without it, the Origin
    must name the host the request was sent to (the scheme is left out:
    behind a proxy that ends TLS the server sees http, the browser https)."""
    site = connection.headers.get("sec-fetch-site")
    if site is not None:
        return site == "same-origin"
    origin = connection.headers.get("origin")
    host = connection.headers.get("host")
    return bool(origin and host) and urlsplit(origin).netloc == host


def cross_site_refusal(connection: HTTPConnection, method: str) -> str | None:
    """Why a cookie-authenticated request may not go on, if it may not."""
    if method in SAFE_METHODS:
        return None
    if connection.headers.get(DASHBOARD_HEADER) != "1":
        return (
            f"a change authenticated by the dashboard's cookie needs the {DASHBOARD_HEADER} "
            "header; other clients send Authorization: Bearer <token>"
        )
    if not same_origin(connection):
        return "a change authenticated by the dashboard's cookie must come from the dashboard"
    return None


def needs_api_token(path: str) -> bool:
    return path.startswith(API_PREFIX) and not ATTEMPT_ROUTES.match(path)


async def caller_for(sessions: sessionmaker[Session], secret: str | None) -> Caller:
    """The caller ``secret`` stands for. While the installation is known to
    have no tokens the answer needs no database; otherwise the lookup runs
    off the event loop."""
    with sessions() as session:
        if tokens.known_off(session):
            return Caller.local_admin()
        return await to_thread.run_sync(tokens.caller_for, session, secret)


def authenticated_caller(scope: Scope) -> Caller | None:
    """The caller :class:`Authentication` found for this request, if it ran."""
    state: dict[str, Any] = scope.get("state") or {}
    return state.get(_CALLER)


class Authentication:
    def __init__(self, app: ASGIApp, sessions: sessionmaker[Session]) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not needs_api_token(scope["path"]):
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        credential = credential_of(connection)
        refusal = credential.from_cookie and cross_site_refusal(connection, scope["method"])
        if refusal:
            await problems.problem(403, refusal)(scope, receive, send)
            return
        try:
            caller = await caller_for(self.sessions, credential.secret)
        except Exception as exc:  # the body is never read: answer here
            response = problems.response_for(exc)
            if response is None:
                raise
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})[_CALLER] = caller
        await self.app(scope, receive, send)
