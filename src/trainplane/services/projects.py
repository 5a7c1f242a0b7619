"""Projects: the unit of tenancy every job, quota and token belongs to."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from trainplane.db.base import utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Project
from trainplane.errors import ConflictError
from trainplane.ids import new_id
from trainplane.services import audit
from trainplane.services.access import Caller, Role


def create_project(
    session: Session, caller: Caller, *, name: str, description: str = ""
) -> Project:
    caller.require_everywhere(Role.ADMIN, "creating a project")
    project = Project(id=new_id(), name=name, description=description, created_at=utcnow())
    try:
        with session.begin():
            session.add(project)
            session.flush()
            audit.record(
                session, caller.subject, "project.create", project_id=project.id, target=name
            )
    except IntegrityError:
        raise ConflictError(f"a project named '{name}' already exists") from None
    return project


def list_projects(session: Session, caller: Caller) -> list[Project]:
    with read_only(session):
        rows = session.scalars(
            select(Project).where(caller.scope(Project.id)).order_by(Project.name)
        )
        return list(rows)
