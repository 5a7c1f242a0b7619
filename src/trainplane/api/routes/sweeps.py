"""``GET /v1/jobs/{id}/trials``: a sweep's trials, its objective and its best
trial so far."""

from __future__ import annotations

from fastapi import APIRouter, Response

from trainplane.api.deps import CallerDep, SessionDep
from trainplane.api.job_refs import JobIdDep
from trainplane.api.problems import PROBLEM_RESPONSES
from trainplane.api.schemas.common import json_response
from trainplane.api.schemas.sweeps import TrialListOut
from trainplane.services import sweeps as sweep_service

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=PROBLEM_RESPONSES)


@router.get("/{job_id}/trials", response_model=TrialListOut)
def list_trials(job_id: JobIdDep, session: SessionDep, caller: CallerDep) -> Response:
    """The sweep's trials by number, each an ordinary job (its id) with its
    parameters and objective values. 422 for a job that is not a sweep."""
    listing = sweep_service.trial_listing(session, caller, job_id)
    return json_response(TrialListOut.from_listing(listing))
