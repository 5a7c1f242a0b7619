"""API tokens: create (the secret is returned once), list, revoke; turn a
bearer secret into a :class:`Caller`; the bootstrap and local admin tokens.

Auth is on once the first token exists (they are never deleted, only revoked,
so it never turns off again). Until then the installation has one user, the
local admin, and needs no token.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from trainplane.db.access_models import ApiToken, TokenGrant
from trainplane.db.base import utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Project
from trainplane.errors import ConflictError, ForbiddenError, NotFoundError, UnauthenticatedError
from trainplane.ids import new_id
from trainplane.services import audit
from trainplane.services.access import Caller, Role

SECRET_PREFIX = "tp_"
SHOWN_PREFIX = 10  # characters of the secret kept to tell tokens apart
BOOTSTRAP_NAME = "bootstrap"
LOCAL_NAME = "local-admin"
NEEDS_TOKEN = "this server needs an API token: send Authorization: Bearer <token>"
FIRST_TOKEN_NOT_ADMIN = (
    "the first token of an installation must be an installation-wide admin (no project, "
    "role admin): once it exists every request needs a token, and a first token of one "
    "project, or with a smaller role, would leave nobody who can administer the installation"
)
LAST_USED_RESOLUTION_SECONDS = 60.0  # how stale a token's last_used_at may get


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    # Secrets are 256 random bits: a plain hash cannot be brute-forced, and it
    # lets one indexed lookup find the token.
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class Grant:
    project: str | None  # None: every project
    role: Role


@dataclass(frozen=True)
class TokenView:
    token: ApiToken
    grants: list[Grant]

    def status(self, now: datetime) -> str:
        if self.token.revoked_at is not None:
            return "revoked"
        if self.token.expires_at is not None and self.token.expires_at <= now:
            return "expired"
        return "active"


@dataclass(frozen=True)
class NewToken:
    view: TokenView
    secret: str


# --- whether auth is on --------------------------------------------------------------------

# Per engine: True once any token exists (for good), or when "none yet" was
# last seen. Another replica's first token is noticed within OFF_RECHECK_SECONDS.
OFF_RECHECK_SECONDS = 1.0
_enabled: weakref.WeakKeyDictionary[Engine, bool | float] = weakref.WeakKeyDictionary()
_enabled_lock = threading.Lock()


def known_off(session: Session) -> bool:
    """Whether auth was seen off within the last OFF_RECHECK_SECONDS: no I/O."""
    with _enabled_lock:
        state = _enabled.get(session.get_bind())  # type: ignore[call-overload]
    return (
        state is not True and state is not None and time.monotonic() - state < OFF_RECHECK_SECONDS
    )


def auth_enabled(session: Session) -> bool:
    """Whether any token was ever created (tokens are never deleted)."""
    engine = session.get_bind()
    with _enabled_lock:
        state = _enabled.get(engine)  # type: ignore[call-overload]
    if state is True:
        return True
    with read_only(session):
        exists = session.scalar(select(func.count()).select_from(ApiToken)) > 0
    with _enabled_lock:
        _enabled[engine] = True if exists else time.monotonic()  # type: ignore[index]
    return exists


def _remember_enabled(session: Session) -> None:
    with _enabled_lock:
        _enabled[session.get_bind()] = True  # type: ignore[index]


# --- authentication ------------------------------------------------------------------------


def caller_for(session: Session, secret: str | None) -> Caller:
    """The caller a request's bearer secret stands for."""
    if not auth_enabled(session):
        return Caller.local_admin()
    if not secret:
        raise UnauthenticatedError(NEEDS_TOKEN)
    now = utcnow()
    with read_only(session):
        token = session.scalar(select(ApiToken).where(ApiToken.secret_hash == hash_secret(secret)))
        if token is None:
            raise UnauthenticatedError("the token is not recognised")
        refusal = _refusal(token, now)
        if refusal is not None:
            raise UnauthenticatedError(refusal)
        grants = session.execute(
            select(TokenGrant.project_id, TokenGrant.role).where(TokenGrant.token_id == token.id)
        ).all()
    last = token.last_used_at
    if last is None or (now - last).total_seconds() >= LAST_USED_RESOLUTION_SECONDS:
        _mark_used(session, token.id, now)
    return Caller.with_grants(
        token.name, {project: Role.named(role) for project, role in grants}, token_id=token.id
    )


def _refusal(token: ApiToken, now: datetime) -> str | None:
    """Why ``token`` no longer works, or None while it does."""
    if token.revoked_at is not None:
        return f"token '{token.name}' was revoked"
    if token.expires_at is not None and token.expires_at <= now:
        return f"token '{token.name}' expired at {token.expires_at:%c}"
    return None


def lapse_reason(session: Session, caller: Caller) -> str | None:
    """For a request that outlives its start (a followed log): why the
    caller's token stopped working since, or None while it works."""
    if caller.token_id is None:
        return None  # the local user of an installation without tokens
    with read_only(session):
        token = session.get(ApiToken, caller.token_id, populate_existing=True)
        if token is None:
            return "the token is gone"
        return _refusal(token, utcnow())


def _mark_used(session: Session, token_id: str, now: datetime) -> None:
    """Record that the token was used, to the minute: a write per request
    would cost every API call a transaction, for a value people read as "in
    use recently or not". Conditional, so concurrent requests write it once."""
    since = now - timedelta(seconds=LAST_USED_RESOLUTION_SECONDS)
    with session.begin():
        session.execute(
            update(ApiToken)
            .where(
                ApiToken.id == token_id,
                or_(ApiToken.last_used_at.is_(None), ApiToken.last_used_at < since),
            )
            .values(last_used_at=now)
            .execution_options(synchronize_session=False)
        )


# --- managing tokens -------------------------------------------------------------------------


def create_token(
    session: Session,
    caller: Caller,
    *,
    name: str,
    project: str | None,
    role: Role,
    kind: str = "user",
    expires_in_seconds: int | None = None,
    audit_detail: Mapping[str, Any] | None = None,
) -> NewToken:
    """A token with ``role`` in ``project`` (None: every project). Only an
    admin of that project may create it; only installation admins may create
    installation-wide ones. The first token of an installation must be an
    installation-wide admin: auth turns on with it, and with only a project's
    token nobody could administer the installation any more."""
    now = utcnow()
    secret = new_secret()
    token = ApiToken(
        id=new_id(),
        name=name,
        kind=kind,
        secret_hash=hash_secret(secret),
        prefix=secret[:SHOWN_PREFIX],
        created_by=caller.subject,
        created_at=now,
        expires_at=now + timedelta(seconds=expires_in_seconds) if expires_in_seconds else None,
    )
    try:
        with session.begin():
            project_id = _grantable_project(session, caller, project)
            if (project_id is not None or role is not Role.ADMIN) and not _any_token(session):
                raise ConflictError(FIRST_TOKEN_NOT_ADMIN)
            session.add(token)
            session.flush()
            session.add(TokenGrant(token_id=token.id, project_id=project_id, role=role.label))
            audit.record(
                session,
                caller.subject,
                "token.create",
                project_id=project_id,
                target=name,
                token_id=token.id,
                role=role.label,
                kind=kind,
                expires_at=token.expires_at.isoformat() if token.expires_at else None,
                **(audit_detail or {}),
            )
    except IntegrityError:
        raise ConflictError(f"a token named '{name}' already exists") from None
    _remember_enabled(session)
    return NewToken(TokenView(token, [Grant(project, role)]), secret)


def create_operator_admin(
    session: Session, *, name: str, operator: str, expires_in_seconds: int | None = None
) -> NewToken:
    """An installation-wide admin token made by someone who reaches the
    database itself (``trainplane tokens create NAME --admin`` on the server's
    machine): how an operator who lost every admin token gets back in. The
    audit trail records who, and that it came through the database."""
    operator_caller = Caller(subject=operator, everywhere=Role.ADMIN)
    return create_token(
        session,
        operator_caller,
        name=name,
        project=None,
        role=Role.ADMIN,
        expires_in_seconds=expires_in_seconds,
        audit_detail={"via": "database"},
    )


def _any_token(session: Session) -> bool:
    return session.scalar(select(ApiToken.id).limit(1)) is not None


def _grantable_project(session: Session, caller: Caller, project: str | None) -> str | None:
    if project is None:
        caller.require_everywhere(Role.ADMIN, "creating an installation-wide token")
        return None
    project_id = session.scalar(
        select(Project.id).where(Project.name == project, caller.scope(Project.id))
    )
    if project_id is None:
        raise NotFoundError(f"no project named '{project}'")
    caller.require(project_id, Role.ADMIN, "creating a token")
    return project_id


def project_names(session: Session, caller: Caller) -> dict[str, str]:
    """Id -> name of the projects the caller has a role in by name."""
    if not caller.roles:
        return {}
    with read_only(session):
        rows = session.execute(select(Project.id, Project.name).where(Project.id.in_(caller.roles)))
        return {row.id: row.name for row in rows}


def list_tokens(session: Session, caller: Caller) -> list[TokenView]:
    """The tokens of the projects the caller administers (installation admins: all)."""
    with read_only(session):
        rows = session.execute(
            select(ApiToken, TokenGrant.project_id, TokenGrant.role, Project.name)
            .join(TokenGrant, TokenGrant.token_id == ApiToken.id)
            .outerjoin(Project, Project.id == TokenGrant.project_id)
            .order_by(ApiToken.created_at, ApiToken.id)
        ).all()
    admin_of = caller.projects_with(Role.ADMIN)
    views: dict[str, TokenView] = {}
    for token, project_id, role, project_name in rows:
        if admin_of is not None and project_id not in admin_of:
            continue
        view = views.setdefault(token.id, TokenView(token, []))
        view.grants.append(Grant(project_name, Role.named(role)))
    return list(views.values())


def revoke_token(session: Session, caller: Caller, token_id: str) -> None:
    """Revoking twice is the same as once. A token the caller may not manage
    is a 404, like one that does not exist."""
    with session.begin():
        token = session.scalar(select(ApiToken).where(ApiToken.id == token_id).with_for_update())
        grants = session.execute(
            select(TokenGrant.project_id).where(TokenGrant.token_id == token_id)
        ).scalars()
        project_ids = list(grants)
        admin_of = caller.projects_with(Role.ADMIN)
        manageable = token is not None and (
            admin_of is None or (project_ids and all(p in admin_of for p in project_ids))
        )
        if not manageable:
            if token is not None and token.id == caller.token_id:
                raise ForbiddenError("revoking this token needs an admin of its project")
            raise NotFoundError(f"no token with id '{token_id}'")
        if token.revoked_at is None:
            token.revoked_at = utcnow()
            audit.record(
                session,
                caller.subject,
                "token.revoke",
                project_id=project_ids[0] if project_ids else None,
                target=token.name,
                token_id=token.id,
            )


# --- the first tokens ----------------------------------------------------------------------


def bootstrap(session: Session, secret: str, *, name: str = BOOTSTRAP_NAME) -> bool:
    """On an installation without tokens, make ``secret`` an admin token of
    every project. Returns whether it did; safe to race (one wins)."""
    now = utcnow()
    try:
        with session.begin():
            if session.scalar(select(func.count()).select_from(ApiToken)):
                return False
            token = ApiToken(
                id=new_id(),
                name=name,
                kind="user",
                secret_hash=hash_secret(secret),
                prefix=secret[:SHOWN_PREFIX],
                created_by="system",
                created_at=now,
            )
            session.add(token)
            session.flush()
            session.add(TokenGrant(token_id=token.id, project_id=None, role=Role.ADMIN.label))
            audit.record(session, "system", "token.create", target=name, token_id=token.id)
    except IntegrityError:
        return False
    _remember_enabled(session)
    return True


def ensure_local_token(session: Session, path: Path) -> str | None:
    """For ``trainplane up``: on an installation without tokens, create an
    admin token of every project and keep its secret in ``path`` (mode 0600),
    where the CLI finds it. Returns the secret the file holds while it still
    works, else None (someone else set up auth)."""
    try:
        kept = path.read_text().strip()
    except OSError:
        kept = ""
    if auth_enabled(session):
        if not kept:
            return None
        with read_only(session):
            token = session.scalar(
                select(ApiToken).where(ApiToken.secret_hash == hash_secret(kept))
            )
        return kept if token is not None and token.revoked_at is None else None
    secret = kept if kept.startswith(SECRET_PREFIX) else new_secret()
    # The file first: a token in the database that nobody holds would lock the user out.
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(".tmp")
    scratch.touch(mode=0o600, exist_ok=True)
    os.chmod(scratch, 0o600)
    scratch.write_text(secret + "\n")
    scratch.replace(path)
    if bootstrap(session, secret, name=LOCAL_NAME):
        return secret
    return ensure_local_token(session, path)  # another process created the first token
