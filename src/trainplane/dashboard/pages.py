"""The dashboard's pages, and the fragments their scripts refresh them with.

Each handler asks the public API for what it shows (see :mod:`.api`) and
renders a template. A page the API refuses renders the refusal: 401 asks for a
token, 404 says what is missing, anything else shows the API's words.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from trainplane import __version__
from trainplane.dashboard import formatting
from trainplane.dashboard.api import TOKEN_COOKIE, ApiError, DashboardApi
from trainplane.dashboard.static_files import asset_version
from trainplane.jobs.states import JobStatus

router = APIRouter(include_in_schema=False)

PAGE_SIZE = 50
USAGE_WINDOWS = (7, 30, 90)
COMPARE_PICKER_SIZE = 30

_templates = Environment(
    loader=PackageLoader("trainplane.dashboard", "templates"),
    autoescape=select_autoescape(default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_templates.filters.update(formatting.FILTERS)
_templates.globals.update(
    version=__version__, asset_version=asset_version, statuses=[s.value for s in JobStatus]
)

Context = dict[str, Any]


async def _render(
    request: Request, template: str, build: Callable[[DashboardApi], Awaitable[Context]]
) -> HTMLResponse:
    started = time.perf_counter()
    async with DashboardApi(request) as api:
        try:
            context = await build(api)
            status = 200
        except ApiError as error:
            template, context, status = "error.html", {"error": error}, error.status
    context.setdefault("path", request.url.path)
    html = _templates.get_template(template).render(request=request, **context)
    elapsed_ms = (time.perf_counter() - started) * 1000
    return HTMLResponse(
        html,
        status_code=status,
        headers={"Server-Timing": f"render;dur={elapsed_ms:.1f}", "Cache-Control": "no-store"},
    )


@dataclass(frozen=True)
class JobListQuery:
    """The jobs page's filters and page, from its query string. An unknown
    status is no filter: the select box only offers real ones."""

    status: str | None = None
    project: str | None = None
    name: str | None = None
    cursor: str | None = None

    @classmethod
    def from_query(
        cls,
        status: str | None = None,
        project: str | None = None,
        name: str | None = None,
        cursor: Annotated[str | None, Query(max_length=512)] = None,
    ) -> JobListQuery:
        known = status in {s.value for s in JobStatus}
        return cls(status if known else None, project or None, name or None, cursor or None)

    @property
    def filters(self) -> Context:
        return {"status": self.status, "project": self.project, "name": self.name}


JobListQueryDep = Annotated[JobListQuery, Depends(JobListQuery.from_query)]


async def _jobs_context(api: DashboardApi, query: JobListQuery) -> Context:
    page = await api.get("/v1/jobs", {**query.filters, "limit": PAGE_SIZE, "cursor": query.cursor})
    return {
        "jobs": page["items"],
        "next_cursor": page["next_cursor"],
        "filters": query.filters,
        "cursor": query.cursor,
    }


@router.get("/", response_class=HTMLResponse)
async def jobs_page(request: Request, query: JobListQueryDep) -> HTMLResponse:
    async def build(api: DashboardApi) -> Context:
        jobs, projects = await api.gather(_jobs_context(api, query), api.get("/v1/projects"))
        return {**jobs, "projects": projects["items"]}

    return await _render(request, "jobs.html", build)


@router.get("/fragments/jobs", response_class=HTMLResponse)
async def jobs_rows(request: Request, query: JobListQueryDep) -> HTMLResponse:
    async def build(api: DashboardApi) -> Context:
        return await _jobs_context(api, query)

    return await _render(request, "_job_rows.html", build)


async def _job_context(api: DashboardApi, job_id: str) -> Context:
    job, events, checkpoints, me, result = await api.gather(
        api.get(f"/v1/jobs/{job_id}"),
        api.get(f"/v1/jobs/{job_id}/events", {"limit": 1000}),
        api.get_or_error(f"/v1/jobs/{job_id}/checkpoints"),
        api.get("/v1/whoami"),
        # A function job's return value or exception; a 404 until it has one.
        api.get_or_error(f"/v1/jobs/{job_id}/result", {"value": "false"}),
    )
    failed = isinstance(checkpoints, ApiError)
    role = me["everywhere"] or me["roles"].get(job["project"])
    return {
        "job": job,
        # A viewer sees no cancel button (the API would refuse it anyway).
        "can_cancel": role in ("member", "admin"),
        "events": events["items"],
        "checkpoints": None if failed else checkpoints,
        "checkpoints_error": checkpoints if failed else None,
        "result": None if isinstance(result, ApiError) else result,
    }


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
async def job_page(request: Request, job_id: str) -> HTMLResponse:
    async def build(api: DashboardApi) -> Context:
        return await _job_context(api, job_id)

    return await _render(request, "job.html", build)


@router.get("/fragments/jobs/{job_id}", response_class=HTMLResponse)
async def job_panels(request: Request, job_id: str) -> HTMLResponse:
    async def build(api: DashboardApi) -> Context:
        return await _job_context(api, job_id)

    return await _render(request, "_job_panels.html", build)


@router.get("/clusters", response_class=HTMLResponse)
async def clusters_page(request: Request) -> HTMLResponse:
    async def build(api: DashboardApi) -> Context:
        return {"clusters": await api.get("/v1/clusters")}

    return await _render(request, "clusters.html", build)


@router.get("/usage", response_class=HTMLResponse)
async def usage_page(request: Request, days: int = 30, project: str | None = None) -> HTMLResponse:
    days = days if days in USAGE_WINDOWS else 30
    until = datetime.now(UTC)
    since = until - timedelta(days=days)

    async def build(api: DashboardApi) -> Context:
        usage, projects = await api.gather(
            api.get(
                "/v1/usage",
                {"since": since.isoformat(), "until": until.isoformat(), "project": project},
            ),
            api.get("/v1/projects"),
        )
        return {
            "usage": usage,
            "projects": projects["items"],
            "days": days,
            "windows": USAGE_WINDOWS,
            "project": project or None,
        }

    return await _render(request, "usage.html", build)


@router.get("/compare", response_class=HTMLResponse)
async def compare_page(
    request: Request,
    ids: Annotated[str, Query(max_length=2000)] = "",
    pick: Annotated[list[str] | None, Query(max_length=20)] = None,
) -> HTMLResponse:
    # ``pick`` is what the picker's checkboxes send when no script runs.
    chosen = list(dict.fromkeys([i.strip() for i in ids.split(",") if i.strip()] + (pick or [])))

    async def build(api: DashboardApi) -> Context:
        recent = await api.get("/v1/jobs", {"limit": COMPARE_PICKER_SIZE})
        comparison = await api.get_or_error("/v1/jobs/compare", {"ids": ",".join(chosen)})
        return {
            "chosen": chosen,
            "recent": recent["items"],
            # With fewer than two jobs the API explains what it needs; the
            # page shows that beside the picker rather than failing.
            "comparison": comparison if not isinstance(comparison, ApiError) else None,
            "problem": comparison if isinstance(comparison, ApiError) and chosen else None,
        }

    return await _render(request, "compare.html", build)


@router.get("/submit", response_class=HTMLResponse)
async def submit_page(request: Request) -> HTMLResponse:
    async def build(api: DashboardApi) -> Context:
        return {"projects": (await api.get("/v1/projects"))["items"]}

    return await _render(request, "submit.html", build)


@router.get("/login")
async def login(token: Annotated[str, Query(min_length=1, max_length=512)]) -> RedirectResponse:
    """Signs the browser in with ``token`` (the link ``trainplane up`` prints)
    and drops it from the address bar. The scripts pick it up from the cookie."""
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(TOKEN_COOKIE, token, samesite="strict", path="/")
    return response
