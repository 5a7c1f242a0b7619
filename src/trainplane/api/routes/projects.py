"""``/v1/projects``."""

from __future__ import annotations

from fastapi import APIRouter

from trainplane.api.deps import CallerDep, FileAccessDep, SessionDep
from trainplane.api.problems import BODY_RESPONSES, PROBLEM_RESPONSES
from trainplane.api.schemas.projects import ProjectCreate, ProjectList, ProjectOut, ProjectUpdate
from trainplane.db.models import Project
from trainplane.services import projects as project_service
from trainplane.services.file_access import FileAccess, ProjectRef

router = APIRouter(prefix="/v1/projects", tags=["projects"], responses=PROBLEM_RESPONSES)


def _out(project: Project, access: FileAccess) -> ProjectOut:
    ref = ProjectRef(project.id, project.name, project.storage)
    return ProjectOut.from_row(project, access.project_root(ref))


@router.post("", status_code=201, response_model=ProjectOut, responses=BODY_RESPONSES)
def create_project(
    body: ProjectCreate, session: SessionDep, caller: CallerDep, access: FileAccessDep
) -> ProjectOut:
    project = project_service.create_project(
        session, caller, name=body.name, access=access, description=body.description
    )
    return _out(project, access)


@router.get("", response_model=ProjectList)
def list_projects(session: SessionDep, caller: CallerDep, access: FileAccessDep) -> ProjectList:
    return ProjectList(
        items=[_out(p, access) for p in project_service.list_projects(session, caller)]
    )


@router.patch("/{name}", response_model=ProjectOut, responses=BODY_RESPONSES)
def update_project(
    name: str, body: ProjectUpdate, session: SessionDep, caller: CallerDep, access: FileAccessDep
) -> ProjectOut:
    """Change the description, the quotas or the storage root (installation admins)."""
    project = project_service.update_project(
        session, caller, name, body.model_dump(exclude_unset=True), access=access
    )
    return _out(project, access)
