"""``/v1/projects``."""

from __future__ import annotations

from fastapi import APIRouter

from trainplane.api.deps import CallerDep, SessionDep
from trainplane.api.problems import BODY_RESPONSES, PROBLEM_RESPONSES
from trainplane.api.schemas import ProjectCreate, ProjectList, ProjectOut, ProjectUpdate
from trainplane.services import projects as project_service

router = APIRouter(prefix="/v1/projects", tags=["projects"], responses=PROBLEM_RESPONSES)


@router.post("", status_code=201, response_model=ProjectOut, responses=BODY_RESPONSES)
def create_project(body: ProjectCreate, session: SessionDep, caller: CallerDep) -> ProjectOut:
    project = project_service.create_project(
        session, caller, name=body.name, description=body.description
    )
    return ProjectOut.from_row(project)


@router.get("", response_model=ProjectList)
def list_projects(session: SessionDep, caller: CallerDep) -> ProjectList:
    return ProjectList(
        items=[ProjectOut.from_row(p) for p in project_service.list_projects(session, caller)]
    )


@router.patch("/{name}", response_model=ProjectOut, responses=BODY_RESPONSES)
def update_project(
    name: str, body: ProjectUpdate, session: SessionDep, caller: CallerDep
) -> ProjectOut:
    """Change the description or the quotas (installation admins)."""
    project = project_service.update_project(
        session, caller, name, body.model_dump(exclude_unset=True)
    )
    return ProjectOut.from_row(project)
