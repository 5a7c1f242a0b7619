"""ORM models of access and ownership: project secrets, owned model and
experiment names, server secrets, API tokens and their grants, and the audit
trail. Importing :mod:`trainplane.db.models` registers these tables too."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from trainplane.db.base import Base, JSONDocument, UTCDateTime, in_list, utcnow


class ProjectSecret(Base):
    """A write-only value a project's jobs receive as an environment variable
    (``entrypoint.secrets``). Only its ciphertext is kept (services.secrets),
    and no API answer ever carries it."""

    __tablename__ = "project_secrets"
    __table_args__ = (UniqueConstraint("project_id", "key"),)

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(128))
    ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    created_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_by: Mapped[str] = mapped_column(String(255))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


OWNED_NAME_KINDS = ["model", "experiment"]


class OwnedName(Base):
    """A registered model name or MLflow experiment, and the project that owns
    it: the first project to name it in a submitted job. Jobs of other
    projects may not name it, and the tracking loops do not touch it for them."""

    __tablename__ = "owned_names"
    __table_args__ = (CheckConstraint(in_list("kind", OWNED_NAME_KINDS), name="kind"),)

    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(256), primary_key=True)
    project_id: Mapped[str] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ServerSecret(Base):
    """Secrets the server generates for itself, once, so that every replica
    against this database uses the same ones (e.g. the attempt token key)."""

    __tablename__ = "server_secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


ROLE_VALUES = ["viewer", "member", "admin"]


class ApiToken(Base):
    """A bearer token of a user or a CI service account. Only the SHA-256 of
    its secret is kept; the secret is shown once, when it is created. Revoked
    tokens stay (the audit trail names them) and never work again."""

    __tablename__ = "api_tokens"
    __table_args__ = (CheckConstraint(in_list("kind", ["user", "service"]), name="kind"),)

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    kind: Mapped[str] = mapped_column(String(16), default="user")
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # The first characters of the secret, to tell tokens apart in lists.
    prefix: Mapped[str] = mapped_column(String(16))
    created_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class TokenGrant(Base):
    """A token's role in one project, or (``project_id`` NULL) in every project."""

    __tablename__ = "token_grants"
    __table_args__ = (
        UniqueConstraint("token_id", "project_id"),
        CheckConstraint(in_list("role", ROLE_VALUES), name="role"),
    )

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    token_id: Mapped[str] = mapped_column(
        ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True
    )
    project_id: Mapped[str | None] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(String(16))


class AuditEvent(Base):
    """Who did what outside a job's own history: tokens created and revoked,
    projects created, clusters registered and removed. (Submissions and
    cancels are job events, with their actor.)"""

    __tablename__ = "audit_events"
    __table_args__ = (Index("ix_audit_events_project_id_id", "project_id", "id"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    actor: Mapped[str] = mapped_column(String(255))
    action: Mapped[str] = mapped_column(String(64))
    project_id: Mapped[str | None] = mapped_column(ForeignKey("projects.id", ondelete="SET NULL"))
    target: Mapped[str] = mapped_column(String(255), default="")
    detail: Mapped[dict[str, Any]] = mapped_column(JSONDocument, default=dict)
