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
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from trainplane import __version__
from trainplane.api.authentication import credential_of, same_origin
from trainplane.dashboard import formatting, sweeps
from trainplane.dashboard.api import DashboardApi
from trainplane.dashboard.cookies import clear_token_cookie, set_token_cookie
from trainplane.dashboard.static_files import asset_version
from trainplane.jobs.states import JobStatus
from trainplane.sdk.errors import TrainplaneError

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
_templates.filters.update(sort_value=sweeps.sort_value, shown=sweeps.shown)
_templates.globals.update(
    version=__version__, asset_version=asset_version, statuses=[s.value for s in JobStatus]
)

Context = dict[str, Any]


def _page(
    request: Request, template: str, context: Context, status: int, started: float
) -> HTMLResponse:
    context.setdefault("path", request.url.path)
    html = _templates.get_template(template).render(request=request, **context)
    elapsed_ms = (time.perf_counter() - started) * 1000
    return HTMLResponse(
        html,
        status_code=status,
        headers={"Server-Timing": f"render;dur={elapsed_ms:.1f}", "Cache-Control": "no-store"},
    )


async def _render(
    request: Request, template: str, build: Callable[[DashboardApi], Awaitable[Context]]
) -> HTMLResponse:
    started = time.perf_counter()
    async with DashboardApi(request) as api:
        try:
            context = await build(api)
            status = 200
        except TrainplaneError as error:
            template, context, status = "error.html", {"error": error}, error.status
    response = _page(request, template, context, status, started)
    credential = credential_of(request)
    if credential.from_cookie and credential.secret:
        if status == 401:
            clear_token_cookie(response)  # revoked or expired: sign in again
        elif not request.url.path.startswith("/fragments/"):
            # Set again as it is set now: a cookie from before it was HttpOnly becomes so.
            set_token_cookie(response, request, credential.secret)
    return response


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


async def _nothing() -> None:
    return None


async def _job_context(api: DashboardApi, job_id: str) -> Context:
    job = await api.get(f"/v1/jobs/{job_id}")
    if job["kind"] == "sweep":
        return await _sweep_context(api, job)
    parent = job.get("parent")
    events, checkpoints, me, result, sweep = await api.gather(
        api.get(f"/v1/jobs/{job_id}/events", {"limit": 1000}),
        api.get_or_error(f"/v1/jobs/{job_id}/checkpoints"),
        api.get("/v1/whoami"),
        # A function job's return value or exception; a 404 until it has one.
        api.get_or_error(f"/v1/jobs/{job_id}/result", {"value": "false"}),
        # A trial links to its sweep, by name.
        api.get_or_error(f"/v1/jobs/{parent}") if parent else _nothing(),
    )
    failed = isinstance(checkpoints, TrainplaneError)
    role = me["everywhere"] or me["roles"].get(job["project"])
    return {
        "job": job,
        # A viewer sees no cancel button (the API would refuse it anyway).
        "can_cancel": role in ("member", "admin"),
        "events": events["items"],
        "checkpoints": None if failed else checkpoints,
        "checkpoints_error": checkpoints if failed else None,
        "result": None if isinstance(result, TrainplaneError) else result,
        "parent": None if isinstance(sweep, TrainplaneError) else sweep,
    }


async def _sweep_context(api: DashboardApi, job: Context) -> Context:
    """A sweep has no attempts, logs or checkpoints of its own: its trials."""
    events, me, trials = await api.gather(
        api.get(f"/v1/jobs/{job['id']}/events", {"limit": 1000}),
        api.get("/v1/whoami"),
        api.get(f"/v1/jobs/{job['id']}/trials"),
    )
    role = me["everywhere"] or me["roles"].get(job["project"])
    return {
        "job": job,
        "can_cancel": role in ("member", "admin"),
        "events": events["items"],
        "sweep": sweeps.sweep_context(job, trials),
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
            "comparison": comparison if not isinstance(comparison, TrainplaneError) else None,
            "problem": comparison if isinstance(comparison, TrainplaneError) and chosen else None,
        }

    return await _render(request, "compare.html", build)


@router.get("/submit", response_class=HTMLResponse)
async def submit_page(request: Request) -> HTMLResponse:
    async def build(api: DashboardApi) -> Context:
        return {"projects": (await api.get("/v1/projects"))["items"]}

    return await _render(request, "submit.html", build)


# --- signing in ------------------------------------------------------------------------------


def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a path of this dashboard, nowhere else."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


async def _sign_in(request: Request, token: str, target: str | None) -> Response:
    """Signs the browser in with ``token`` once the API accepts it."""
    started = time.perf_counter()
    async with DashboardApi(request, token=token) as api:
        try:
            await api.get("/v1/whoami")
        except TrainplaneError as error:
            context = {"error": error.detail, "next": _safe_next(target)}
            return _page(request, "login.html", context, error.status, started)
    response = RedirectResponse(_safe_next(target), status_code=303)
    set_token_cookie(response, request, token)
    return response


def _refuse_other_origins(request: Request) -> None:
    # Signing in or out is a change: only this dashboard's own pages ask for
    # it. A browser always says where a post comes from; other clients may not.
    says = "sec-fetch-site" in request.headers or "origin" in request.headers
    if says and not same_origin(request):
        raise HTTPException(403, "sign in from this dashboard's own page")


@router.get("/login", response_model=None)
async def login_page(
    request: Request,
    token: Annotated[str | None, Query(min_length=1, max_length=512)] = None,
    target: Annotated[str | None, Query(alias="next", max_length=2000)] = None,
) -> Response:
    """The sign-in page. ``?token=`` (the link older ``trainplane up`` printed)
    still signs in, and drops the token from the address bar at once."""
    if token is not None:
        return await _sign_in(request, token, "/")
    return _page(request, "login.html", {"next": _safe_next(target)}, 200, time.perf_counter())


@router.post("/login", response_model=None)
async def login(request: Request) -> Response:
    """The sign-in form: ``token`` (and ``next``), form-encoded."""
    _refuse_other_origins(request)
    form = parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=10)
    token = (form.get("token") or [""])[0].strip()
    target = (form.get("next") or ["/"])[0]
    if not token or len(token) > 512:
        context = {"error": "paste a token to sign in", "next": _safe_next(target)}
        return _page(request, "login.html", context, 422, time.perf_counter())
    return await _sign_in(request, token, target)


@router.post("/logout")
async def logout(request: Request) -> RedirectResponse:
    """Forgets this browser's token."""
    _refuse_other_origins(request)
    response = RedirectResponse("/login", status_code=303)
    clear_token_cookie(response)
    return response
