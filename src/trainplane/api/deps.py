"""Request dependencies: the database session and the caller.

They are ``async def`` on purpose: none of them blocks, and FastAPI runs plain
``def`` dependencies through the thread pool, a hop each per request. The
session opens no connection until a service uses it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from trainplane.services.access import Caller


async def get_session(request: Request) -> AsyncIterator[Session]:
    # Services close their own transactions, so closing the session only
    # returns an idle connection to the pool: no I/O on the event loop.
    with request.app.state.sessions() as session:
        yield session


async def get_caller(request: Request) -> Caller:
    # Every route gets its caller here and only here: token auth replaces the
    # body of this function, and services already scope queries by Caller.
    return Caller.local_admin()


SessionDep = Annotated[Session, Depends(get_session)]
CallerDep = Annotated[Caller, Depends(get_caller)]
