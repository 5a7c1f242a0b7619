"""``/v1/usage``: GPU-hours and cost by project, experiment, job and day."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Response

from trainplane.api.deps import CallerDep, SessionDep
from trainplane.api.problems import PROBLEM_RESPONSES
from trainplane.api.schemas.common import json_response
from trainplane.api.schemas.usage import UsageOut
from trainplane.jobs.spec import ProjectName
from trainplane.services import usage as usage_service

router = APIRouter(prefix="/v1/usage", tags=["usage"], responses=PROBLEM_RESPONSES)


@router.get("", response_model=UsageOut)
def get_usage(
    session: SessionDep,
    caller: CallerDep,
    since: Annotated[
        datetime | None, Query(description="Start of the window (ISO 8601); default: 30 days ago.")
    ] = None,
    until: Annotated[datetime | None, Query(description="End of the window; default: now.")] = None,
    project: Annotated[ProjectName | None, Query()] = None,
) -> Response:
    """What the caller's projects used in the window: attempts are clipped to
    it, and a running attempt counts up to now."""
    report = usage_service.usage_report(session, caller, since=since, until=until, project=project)
    return json_response(UsageOut.from_report(report))
