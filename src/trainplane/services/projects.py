"""Projects: the unit of tenancy every job, quota and token belongs to."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from trainplane.db.base import utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Project
from trainplane.errors import ConflictError, ForbiddenError, InvalidInputError, NotFoundError
from trainplane.ids import new_id
from trainplane.services import audit
from trainplane.services.access import Caller, Role
from trainplane.services.file_access import FileAccess, ProjectRef, storage_root_refusal
from trainplane.services.names import check_default_experiment_free


def create_project(
    session: Session, caller: Caller, *, name: str, access: FileAccess, description: str = ""
) -> Project:
    caller.require_everywhere(Role.ADMIN, "creating a project")
    project = Project(id=new_id(), name=name, description=description, created_at=utcnow())
    try:
        with session.begin():
            check_default_experiment_free(session, name)
            # Another project's root set inside <default storage>/<name>
            # would make that project's files this one's.
            refusal = storage_root_refusal(
                access.project_root(ProjectRef(project.id, name, None)),
                _other_roots(session, project.id, access),
                access,
            )
            if refusal:
                raise ConflictError(
                    f"project '{name}' cannot be created: its default storage root {refusal}"
                )
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


def update_project(
    session: Session, caller: Caller, name: str, changes: dict, *, access: FileAccess
) -> Project:
    """Quotas and the storage root are the installation's to set, not the
    project's own admins'. A new storage root applies to jobs submitted from
    then on: each job's folder was fixed when it was submitted."""
    caller.require_everywhere(Role.ADMIN, "changing a project's quotas or storage")
    with session.begin():
        project = session.scalar(select(Project).where(Project.name == name).with_for_update())
        if project is None:
            raise NotFoundError(f"no project named '{name}'")
        if "storage" in changes:
            _check_storage_root(session, project, changes["storage"], access)
        before = {key: getattr(project, key) for key in changes}
        for key, value in changes.items():
            setattr(project, key, "" if key == "description" and value is None else value)
        audit.record(
            session,
            caller.subject,
            "project.update",
            project_id=project.id,
            target=name,
            before=before,
            after=changes,
        )
    session.expunge(project)
    return project


def _check_storage_root(
    session: Session, project: Project, storage: str | None, access: FileAccess
) -> None:
    """422 on ``storage`` when the project's new root (its default one, for
    None) would hold trainplane's own files or another project's."""
    root = access.project_root(ProjectRef(project.id, project.name, storage))
    refusal = storage_root_refusal(root, _other_roots(session, project.id, access), access)
    if refusal:
        raise InvalidInputError("storage", refusal)


def _other_roots(session: Session, project_id: str, access: FileAccess) -> dict[str, str]:
    """Every other project's name -> its storage root."""
    return {
        row.name: access.project_root(ProjectRef(row.id, row.name, row.storage))
        for row in session.execute(
            select(Project.id, Project.name, Project.storage).where(Project.id != project_id)
        )
    }


def project_for(session: Session, caller: Caller, name: str, role: Role, doing: str) -> ProjectRef:
    """The project named ``name`` once the caller is known to hold ``role``
    there: the first thing a spec is checked for, before any file, bucket or
    registry is touched on the caller's behalf. A project the caller cannot
    see is refused the same whether or not it exists."""
    with read_only(session):
        row = session.execute(
            select(Project.id, Project.name, Project.storage).where(
                Project.name == name, caller.scope(Project.id)
            )
        ).one_or_none()
    if row is None:
        if caller.project_ids is not None:
            raise ForbiddenError(
                f"{doing} in project '{name}' needs the {role.label} role there "
                "(or the project does not exist)"
            )
        raise InvalidInputError(
            "project", f"no project named '{name}'; create it with POST /v1/projects"
        )
    caller.require(row.id, role, doing)
    return ProjectRef(row.id, row.name, row.storage)
