"""Bodies of ``/v1/tokens`` and ``/v1/audit``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, field_validator

from trainplane.db.access_models import AuditEvent
from trainplane.jobs.durations import parse_duration
from trainplane.jobs.spec import ProjectName
from trainplane.services.access import Caller
from trainplane.services.tokens import NewToken, TokenView

MAX_EXPIRY_SECONDS = 5 * 366 * 86_400

TokenName = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$"),
    Field(description="Letters, digits, '.', '_', '@', '-'; it names the caller in events."),
]


class TokenCreate(BaseModel):
    model_config = {"extra": "forbid"}

    name: TokenName
    project: ProjectName | None = Field(
        default=None, description="The project the role is in; omit for every project."
    )
    role: Literal["viewer", "member", "admin"] = "member"
    kind: Literal["user", "service"] = Field(
        default="user", description="service: a CI pipeline or another program."
    )
    expires_in: int | str | None = Field(
        default=None,
        description="Seconds, or a duration such as 30d or 12h; omit for no expiry.",
    )

    @field_validator("expires_in")
    @classmethod
    def _seconds(cls, value: int | str | None) -> int | None:
        if value is None:
            return None
        seconds = parse_duration(value) if isinstance(value, str) else value
        if not 0 < seconds <= MAX_EXPIRY_SECONDS:
            raise ValueError(f"must be between 1 second and {MAX_EXPIRY_SECONDS // 86_400} days")
        return seconds


class GrantOut(BaseModel):
    project: str | None = Field(description="Null: every project.")
    role: str


class TokenOut(BaseModel):
    id: str
    name: str
    kind: str
    prefix: str = Field(description="The secret's first characters, to recognise it.")
    status: Literal["active", "expired", "revoked"]
    grants: list[GrantOut]
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None = Field(description="To the minute; null: never used.")

    @classmethod
    def from_view(cls, view: TokenView, now: datetime) -> TokenOut:
        t = view.token
        return cls(
            id=t.id,
            name=t.name,
            kind=t.kind,
            prefix=t.prefix,
            status=view.status(now),  # type: ignore[arg-type]
            grants=[GrantOut(project=g.project, role=g.role.label) for g in view.grants],
            created_by=t.created_by,
            created_at=t.created_at,
            expires_at=t.expires_at,
            revoked_at=t.revoked_at,
            last_used_at=t.last_used_at,
        )


class TokenCreated(TokenOut):
    token: str = Field(description="The secret. It is shown this once and never again.")

    @classmethod
    def from_new(cls, new: NewToken, now: datetime) -> TokenCreated:
        return cls(**TokenOut.from_view(new.view, now).model_dump(), token=new.secret)


class TokenList(BaseModel):
    items: list[TokenOut]


class AuditEventOut(BaseModel):
    id: int
    created_at: datetime
    actor: str
    action: str
    project_id: str | None
    target: str
    detail: dict[str, Any]

    @classmethod
    def from_row(cls, row: AuditEvent) -> AuditEventOut:
        return cls.model_validate(row, from_attributes=True)


class AuditList(BaseModel):
    items: list[AuditEventOut]
    next_after: int | None = Field(description="Pass as `after` for the next page.")


class ServerFacts(BaseModel):
    local_paths: bool = Field(
        description="Whether specs may name the submitting machine's files: true only for "
        "`trainplane up` on loopback. Otherwise clients upload code and inputs."
    )


class WhoAmI(BaseModel):
    subject: str = Field(description="The name job and audit events give this caller.")
    token_id: str | None = Field(description="Null without auth (the local admin).")
    everywhere: str | None = Field(description="The role in every project, if any.")
    roles: dict[str, str] = Field(description="Project name -> role.")
    server: ServerFacts = Field(description="What this server accepts from clients.")

    @classmethod
    def of(cls, caller: Caller, names: dict[str, str], *, local_paths: bool) -> WhoAmI:
        return cls(
            subject=caller.subject,
            token_id=caller.token_id,
            everywhere=caller.everywhere.label if caller.everywhere else None,
            roles={names[p]: r.label for p, r in caller.roles.items() if p in names},
            server=ServerFacts(local_paths=local_paths),
        )
