"""The audit trail of what happens outside a job's own history. Written in
the transaction of the change it records, so it holds exactly what happened."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainplane.db.access_models import AuditEvent
from trainplane.db.base import utcnow
from trainplane.db.engine import read_only
from trainplane.services.access import Caller, Role


def record(
    session: Session,
    actor: str,
    action: str,
    *,
    project_id: str | None = None,
    target: str = "",
    **detail: Any,
) -> None:
    """Add an audit event to the open transaction."""
    session.add(
        AuditEvent(
            created_at=utcnow(),
            actor=actor,
            action=action,
            project_id=project_id,
            target=target,
            detail=detail,
        )
    )


def list_events(
    session: Session, caller: Caller, *, limit: int, after: int | None = None
) -> list[AuditEvent]:
    """Oldest first. Project admins see their projects' events; installation
    admins also see the installation's own (clusters, projects, global tokens)."""
    query = select(AuditEvent)
    admin_of = caller.projects_with(Role.ADMIN)
    if admin_of is not None:
        query = query.where(AuditEvent.project_id.in_(admin_of))
    if after is not None:
        query = query.where(AuditEvent.id > after)
    with read_only(session):
        return list(session.scalars(query.order_by(AuditEvent.id).limit(limit)))
