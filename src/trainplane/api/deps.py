"""Request dependencies: the database session, the caller (as the
Authentication middleware found it, before the body was read), the settings,
and the token key of attempt-authenticated routes.

They are ``async def`` on purpose: none of them blocks, and FastAPI runs plain
``def`` dependencies through the thread pool, a hop each per request. The
session opens no connection until a service uses it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from trainplane.api import authentication
from trainplane.config import Settings
from trainplane.services.access import Caller
from trainplane.services.attempt_tokens import TokenKey
from trainplane.services.file_access import FileAccess


async def get_session(request: Request) -> AsyncIterator[Session]:
    # Services close their own transactions, so closing the session only
    # returns an idle connection to the pool: no I/O on the event loop.
    with request.app.state.sessions() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_token_key(request: Request) -> TokenKey:
    return request.app.state.token_key


async def get_file_access(request: Request) -> FileAccess:
    return request.app.state.file_access


# auto_error=False: a missing credential is the service's to refuse, as a problem.
_bearer = HTTPBearer(auto_error=False)


async def get_bearer_token(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str | None:
    """The credential of ``Authorization: Bearer <token>``; None when absent."""
    return credentials.credentials if credentials is not None else None


SettingsDep = Annotated[Settings, Depends(get_settings)]
TokenKeyDep = Annotated[TokenKey, Depends(get_token_key)]
FileAccessDep = Annotated[FileAccess, Depends(get_file_access)]
BearerTokenDep = Annotated[str | None, Depends(get_bearer_token)]


async def get_caller(request: Request, token: BearerTokenDep) -> Caller:
    # Every route gets its caller here and only here; services scope every
    # query by it. The Authentication middleware found it before the body was
    # read (the bearer dependency stays for the OpenAPI document). A route it
    # does not cover still authenticates, by the bearer token alone.
    known = authentication.authenticated_caller(request.scope)
    if known is not None:
        return known
    return await authentication.caller_for(request.app.state.sessions, token)


CallerDep = Annotated[Caller, Depends(get_caller)]
