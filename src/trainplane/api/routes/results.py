"""What a function job's train function returned or raised: reported by the
attempt's runtime (``PUT .../attempts/{id}/result``), read by users and the
SDK (``GET /v1/jobs/{id}/result``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query, Response

from trainplane.api.deps import BearerTokenDep, CallerDep, SessionDep, TokenKeyDep
from trainplane.api.job_refs import JobIdDep
from trainplane.api.problems import BODY_RESPONSES, PROBLEM_RESPONSES, problem_response
from trainplane.api.schemas.common import json_response
from trainplane.api.schemas.results import JobResultOut, ResultAckOut
from trainplane.jobs.results import ResultReport
from trainplane.services import results as result_service

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=PROBLEM_RESPONSES)


@router.put(
    "/{job_id}/attempts/{attempt_id}/result",
    response_model=ResultAckOut,
    responses={401: problem_response("Missing or wrong attempt token"), **BODY_RESPONSES},
)
def report_result(
    job_id: str,
    attempt_id: str,
    report: Annotated[ResultReport, Body()],
    session: SessionDep,
    token_key: TokenKeyDep,
    token: BearerTokenDep,
) -> ResultAckOut:
    """For the attempt's runtime, with its attempt token: rank 0's return value
    or a rank's exception. 409 once the attempt has ended."""
    recorded = result_service.record_result(
        session, token_key, job_id=job_id, attempt_id=attempt_id, token=token, report=report
    )
    return ResultAckOut(recorded=recorded)


@router.get("/{job_id}/result", response_model=JobResultOut)
def get_result(
    job_id: JobIdDep,
    session: SessionDep,
    caller: CallerDep,
    value: Annotated[
        bool, Query(description="false: leave the pickled value out (value_repr stays).")
    ] = True,
) -> Response:
    """The result of the latest attempt that reported one; 404 until then."""
    view = result_service.job_result(session, caller, job_id)
    return json_response(JobResultOut.from_view(view, with_value=value))
