"""Attempt progress: reported by runtimes (``POST .../attempts/{id}/progress``)
and read by users (``GET /v1/jobs/{id}/metrics``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query, Request, Response

from trainplane.api.deps import BearerTokenDep, CallerDep, SessionDep, TokenKeyDep
from trainplane.api.job_refs import JobIdDep
from trainplane.api.problems import BODY_RESPONSES, PROBLEM_RESPONSES, problem_response
from trainplane.api.schemas.common import json_response
from trainplane.api.schemas.progress import MetricsOut, ProgressAckOut
from trainplane.jobs.progress import ProgressReport
from trainplane.services import progress as progress_service

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=PROBLEM_RESPONSES)

DEFAULT_METRICS_PAGE = 1000
MAX_METRICS_PAGE = 10_000


@router.post(
    "/{job_id}/attempts/{attempt_id}/progress",
    response_model=ProgressAckOut,
    responses={
        401: problem_response("Missing or wrong attempt token"),
        429: problem_response("Reporting too often; send again after Retry-After seconds"),
        **BODY_RESPONSES,
    },
)
def report_progress(
    job_id: str,
    attempt_id: str,
    report: Annotated[ProgressReport, Body()],
    request: Request,
    session: SessionDep,
    token_key: TokenKeyDep,
    token: BearerTokenDep,
) -> ProgressAckOut:
    """For the attempt's runtime: its step, a batch of metric points, and the
    restarts Ray Train made in place (numbered; each spends the job's restart
    budget and gets a job event). Every call is a heartbeat. The answer's
    `stop` asks the attempt to checkpoint and stop (it was preempted). 409
    once the attempt has ended: stop reporting. 429 (with Retry-After) past a
    burst of reports; 422 on `metrics` for a report that would give the
    attempt more distinct metric names than allowed."""
    # Authenticated by the attempt token (TRAINPLANE_ATTEMPT_TOKEN), not by a
    # Caller: the runtime holds no user's credential, and must not, since its
    # code and environment are the job author's. The token lets it do one
    # thing: report on its own attempt while that attempt is live.
    stop = progress_service.record_progress(
        session,
        token_key,
        job_id=job_id,
        attempt_id=attempt_id,
        token=token,
        report=report,
        rate_limit=request.app.state.progress_rate_limit,
    )
    return ProgressAckOut.of(stop)


@router.get("/{job_id}/metrics", response_model=MetricsOut)
def get_metrics(
    job_id: JobIdDep,
    session: SessionDep,
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=MAX_METRICS_PAGE)] = DEFAULT_METRICS_PAGE,
    cursor: Annotated[
        str | None, Query(pattern=r"^[0-9]{1,18}$", description="A next_cursor from before.")
    ] = None,
) -> Response:
    """The latest attempt's progress and the job's metric points, oldest first."""
    after = int(cursor) if cursor is not None else None
    page = progress_service.job_metrics(session, caller, job_id, limit=limit, after=after)
    return json_response(MetricsOut.from_page(page))
