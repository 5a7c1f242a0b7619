"""``/v1/jobs``: submit, list, read, cancel, and the event history."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Header, Query, Request, Response
from fastapi.responses import PlainTextResponse, StreamingResponse

from trainplane.api.deps import CallerDep, FileAccessDep, SessionDep, SettingsDep
from trainplane.api.job_refs import JobIdDep
from trainplane.api.problems import BODY_RESPONSES, PROBLEM_RESPONSES
from trainplane.api.schemas.common import json_response
from trainplane.api.schemas.jobs import EventList, EventOut, JobOut, JobPage, JobSummary
from trainplane.api.schemas.plans import PlanOut
from trainplane.api.schemas.tracking import ComparisonOut
from trainplane.api.yaml_bodies import YAML_REQUEST_BODY
from trainplane.jobs.spec import JobName, JobSpec, ProjectName
from trainplane.jobs.states import JobStatus
from trainplane.services import compare as compare_service
from trainplane.services import jobs as job_service
from trainplane.services import logs as log_service
from trainplane.services import plans as plan_service
from trainplane.services.pagination import DEFAULT_PAGE_SIZE, MAX_EVENT_ID, MAX_PAGE_SIZE

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=PROBLEM_RESPONSES)

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        pattern=r"^[\x21-\x7e]+$",
        description="Retrying with the same key and spec returns the first job; "
        "the same key with another spec is 409.",
    ),
]


@router.post(
    "",
    status_code=201,
    response_model=JobOut,
    responses=BODY_RESPONSES,
    openapi_extra=YAML_REQUEST_BODY,
)
def submit_job(
    spec: Annotated[JobSpec, Body(description="A job spec, as in DESIGN.md.")],
    session: SessionDep,
    caller: CallerDep,
    settings: SettingsDep,
    access: FileAccessDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    submission = job_service.submit_job(
        session, caller, spec, access=access, idempotency_key=idempotency_key
    )
    headers = {"Location": f"/v1/jobs/{submission.job.id}"}
    if not submission.created:
        headers["Idempotent-Replayed"] = "true"
    tracking = settings.tracking_enabled
    return json_response(
        JobOut.from_new(submission.job, tracking_enabled=tracking)
        if submission.created
        else JobOut.from_detail(
            job_service.get_job(session, caller, submission.job.id, rules=settings.service_rules()),
            tracking_enabled=tracking,
        ),
        201 if submission.created else 200,
        headers,
    )


@router.get("", response_model=JobPage)
def list_jobs(
    session: SessionDep,
    caller: CallerDep,
    settings: SettingsDep,
    status: Annotated[list[JobStatus] | None, Query(description="Repeat to match several.")] = None,
    project: Annotated[ProjectName | None, Query()] = None,
    name: Annotated[JobName | None, Query()] = None,
    parent: Annotated[
        str | None, Query(max_length=26, description="A sweep's id: its trials.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> Response:
    filters = job_service.JobFilter(
        statuses=status or (), project=project, name=name, parent=parent
    )
    page = job_service.list_jobs(
        session, caller, filters, limit=limit, cursor=cursor, rules=settings.service_rules()
    )
    return json_response(
        JobPage(
            items=[
                JobSummary.from_row(j, page.queue.get(j.id), page.usage.get(j.id))
                for j in page.items
            ],
            next_cursor=page.next_cursor,
        )
    )


@router.post(
    "/plan", response_model=PlanOut, responses=BODY_RESPONSES, openapi_extra=YAML_REQUEST_BODY
)
def plan_job(
    spec: Annotated[JobSpec, Body(description="A job spec, as for POST /v1/jobs.")],
    session: SessionDep,
    caller: CallerDep,
    settings: SettingsDep,
    access: FileAccessDep,
) -> Response:
    """A dry run of submitting ``spec``: the same validation and checks of the
    files it reads and of its checkpoint storage (422 when they fail), and
    where it would be placed now. Creates nothing."""
    plan = plan_service.plan_job(
        session, caller, spec, access=access, rules=settings.service_rules()
    )
    return json_response(PlanOut.from_plan(plan))


# Before /{job_id}, which would take "compare" for an id.
@router.get("/compare", response_model=ComparisonOut)
def compare_jobs(
    session: SessionDep,
    caller: CallerDep,
    ids: Annotated[
        str,
        Query(
            max_length=2000,
            description=f"{compare_service.MIN_JOBS} to {compare_service.MAX_JOBS} job ids, "
            "comma-separated.",
        ),
    ],
) -> Response:
    """The jobs' differing spec fields and final metrics, side by side."""
    comparison = compare_service.compare_jobs(session, caller, compare_service.parse_ids(ids))
    return json_response(ComparisonOut.from_comparison(comparison))


@router.get("/{job_id}", response_model=JobOut)
def get_job(
    job_id: JobIdDep, session: SessionDep, caller: CallerDep, settings: SettingsDep
) -> Response:
    detail = job_service.get_job(session, caller, job_id, rules=settings.service_rules())
    return json_response(JobOut.from_detail(detail, tracking_enabled=settings.tracking_enabled))


@router.post("/{job_id}/cancel", response_model=JobOut)
def cancel_job(
    job_id: JobIdDep, session: SessionDep, caller: CallerDep, settings: SettingsDep
) -> Response:
    detail = job_service.cancel_job(session, caller, job_id)
    return json_response(JobOut.from_detail(detail, tracking_enabled=settings.tracking_enabled))


@router.get("/{job_id}/events", response_model=EventList)
def list_events(
    job_id: JobIdDep,
    session: SessionDep,
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_EVENT_ID, description="Event id to continue after.")
    ] = None,
) -> Response:
    events = job_service.list_events(session, caller, job_id, limit=limit, after=after)
    next_after = events[-1].id if len(events) == limit else None
    return json_response(
        EventList(items=[EventOut.from_row(e) for e in events], next_after=next_after)
    )


@router.get(
    "/{job_id}/logs",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}, "text/event-stream": {}}}},
)
def get_logs(
    job_id: JobIdDep,
    request: Request,
    session: SessionDep,
    caller: CallerDep,
    follow: Annotated[
        bool, Query(description="Stream every attempt's log as server-sent events until the end.")
    ] = False,
    attempt: Annotated[int | None, Query(ge=1, description="Default: the latest.")] = None,
) -> Response:
    """The log of one attempt (plain text), or with ``follow=true`` all of them,
    live, as ``text/event-stream`` events ``status``, ``attempt``, ``log``, ``end``."""
    clusters = request.app.state.ray_clusters
    state = log_service.log_state(session, caller, job_id)  # 404s before streaming starts
    if follow:
        stream = log_service.follow_job_logs(request.app.state.sessions, caller, job_id, clusters)
        return StreamingResponse(
            stream,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    chosen = log_service.pick_attempt(state, attempt)
    text = log_service.read_attempt_log(chosen, clusters) if chosen else ""
    return PlainTextResponse(text)
