"""``GET /v1/jobs/{id}/checkpoints``: a job's complete checkpoints, read from its storage."""

from __future__ import annotations

from fastapi import APIRouter, Response

from trainplane.api.deps import CallerDep, SessionDep, SettingsDep
from trainplane.api.job_refs import JobIdDep
from trainplane.api.problems import PROBLEM_RESPONSES, problem_response
from trainplane.api.schemas.checkpoints import CheckpointList
from trainplane.api.schemas.common import json_response
from trainplane.services import checkpoints as checkpoint_service

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=PROBLEM_RESPONSES)


@router.get(
    "/{job_id}/checkpoints",
    response_model=CheckpointList,
    responses={502: problem_response("The checkpoint storage could not be read")},
)
def list_checkpoints(
    job_id: JobIdDep, session: SessionDep, caller: CallerDep, settings: SettingsDep
) -> Response:
    """Checkpoints with a valid manifest, newest step first; empty until the
    job has saved one."""
    listing = checkpoint_service.list_checkpoints(
        session, caller, job_id, default_storage=settings.resolved_checkpoint_storage
    )
    return json_response(CheckpointList.from_listing(listing))
