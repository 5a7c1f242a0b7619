"""``/v1/tokens``: API tokens and their roles; ``/v1/audit``: who did what."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from trainplane.api.deps import CallerDep, FileAccessDep, SessionDep
from trainplane.api.problems import BODY_RESPONSES, PROBLEM_RESPONSES
from trainplane.api.schemas.common import json_response
from trainplane.api.schemas.tokens import (
    AuditEventOut,
    AuditList,
    TokenCreate,
    TokenCreated,
    TokenList,
    TokenOut,
    WhoAmI,
)
from trainplane.db.base import utcnow
from trainplane.services import audit as audit_service
from trainplane.services import tokens as token_service
from trainplane.services.access import Role
from trainplane.services.pagination import MAX_EVENT_ID

router = APIRouter(tags=["tokens"], responses=PROBLEM_RESPONSES)


@router.get("/v1/whoami", response_model=WhoAmI, tags=["tokens"])
def whoami(session: SessionDep, caller: CallerDep, access: FileAccessDep) -> Response:
    """The caller and its roles, as this server sees them, and whether specs
    may name this machine's files (clients upload them otherwise)."""
    names = token_service.project_names(session, caller)
    return json_response(WhoAmI.of(caller, names, local_paths=access.local_user))


@router.post("/v1/tokens", status_code=201, response_model=TokenCreated, responses=BODY_RESPONSES)
def create_token(body: TokenCreate, session: SessionDep, caller: CallerDep) -> Response:
    """A token with one role in one project (or every project). The response
    carries the secret, once; only its hash is kept."""
    new = token_service.create_token(
        session,
        caller,
        name=body.name,
        project=body.project,
        role=Role.named(body.role),
        kind=body.kind,
        expires_in_seconds=body.expires_in,  # type: ignore[arg-type]
    )
    return json_response(TokenCreated.from_new(new, utcnow()), 201)


@router.get("/v1/tokens", response_model=TokenList)
def list_tokens(session: SessionDep, caller: CallerDep) -> Response:
    """The tokens of the projects you administer; never their secrets."""
    now = utcnow()
    views = token_service.list_tokens(session, caller)
    return json_response(TokenList(items=[TokenOut.from_view(v, now) for v in views]))


@router.delete("/v1/tokens/{token_id}", status_code=204)
def revoke_token(token_id: str, session: SessionDep, caller: CallerDep) -> Response:
    token_service.revoke_token(session, caller, token_id)
    return Response(status_code=204)


@router.get("/v1/audit", response_model=AuditList, tags=["audit"])
def list_audit_events(
    session: SessionDep,
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_EVENT_ID, description="Event id to continue after.")
    ] = None,
) -> Response:
    """Tokens, projects and clusters created, changed and removed, oldest
    first: your projects' events, or all of them for installation admins."""
    events = audit_service.list_events(session, caller, limit=limit, after=after)
    next_after = events[-1].id if len(events) == limit else None
    return json_response(
        AuditList(items=[AuditEventOut.from_row(e) for e in events], next_after=next_after)
    )
