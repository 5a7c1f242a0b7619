"""``trainplane``: command-line entry point.

Exit codes: 0 success (for ``submit --wait``: the job SUCCEEDED), 1 the job did
not succeed or the server refused the request, 2 bad usage or an invalid spec.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from trainplane.cli.client import DEFAULT_URL, ApiClient, ApiError
from trainplane.cli.output import print_events, print_job, print_jobs
from trainplane.cli.specfile import SpecFileError, load_spec_file

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Multi-GPU training jobs on Ray."
)
db_app = typer.Typer(no_args_is_help=True, help="Database schema.")
jobs_app = typer.Typer(no_args_is_help=True, help="Inspect and control jobs.")
projects_app = typer.Typer(no_args_is_help=True, help="Projects jobs belong to.")
app.add_typer(db_app, name="db")
app.add_typer(jobs_app, name="jobs")
app.add_typer(projects_app, name="projects")

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


class State:
    url: str = DEFAULT_URL
    token: str | None = None

    @classmethod
    def client(cls) -> ApiClient:
        return ApiClient(cls.url, cls.token)


def _say(message: str) -> None:
    typer.echo(message, err=True)


def _fail(message: str, code: int = 1) -> typer.Exit:
    _say(message)
    return typer.Exit(code)


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except ApiError as exc:
        raise _fail(str(exc), 2 if exc.status == 422 else 1) from None


@app.callback()
def _root(
    url: Annotated[str, typer.Option(envvar="TRAINPLANE_URL", help="API address.")] = DEFAULT_URL,
    token: Annotated[str | None, typer.Option(envvar="TRAINPLANE_TOKEN", help="API token.")] = None,
) -> None:
    State.url, State.token = url, token


# --- servers and the database --------------------------------------------------


@app.command()
def server(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    workers: Annotated[int, typer.Option(min=1, help="API worker processes.")] = 1,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Run the API server (settings from TRAINPLANE_* variables)."""
    import uvicorn

    from trainplane.config import Settings

    settings = Settings()
    if settings.should_auto_migrate:
        # Migrate once here, not once per worker process.
        from trainplane.db import migrate

        migrate.upgrade(settings.resolved_database_url)
    uvicorn.run(
        "trainplane.api.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        access_log=False,
    )


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head") -> None:
    """Apply database migrations."""
    from trainplane.config import Settings
    from trainplane.db import migrate
    from trainplane.db.engine import make_engine

    url = Settings().resolved_database_url
    migrate.upgrade(url, revision)
    engine = make_engine(url, single_use=True)
    try:
        _say(f"database schema at {', '.join(migrate.current_revisions(engine)) or 'base'}")
    finally:
        engine.dispose()


# --- jobs ------------------------------------------------------------------------


@app.command()
def submit(
    file: Annotated[Path, typer.Argument(help="Job spec, YAML or JSON.")],
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a field: --set resources.gpus=4 (repeatable)."),
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="Resubmitting with the same key returns the same job.")
    ] = None,
    wait: Annotated[
        bool, typer.Option(help="Wait for the job to end; exit 0 only if it SUCCEEDED.")
    ] = False,
    timeout: Annotated[
        float | None, typer.Option(help="Give up waiting after this many seconds.")
    ] = None,
) -> None:
    """Submit a job; prints its id."""
    try:
        spec = load_spec_file(file, set_ or [])
    except SpecFileError as exc:
        raise _fail(str(exc), 2) from None
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    client = State.client()
    job = _call(client.post, "/v1/jobs", spec, headers=headers)
    typer.echo(job["id"])
    _say(f"job {job['id']} ({job['name']}) {job['status']}: {job['reason']}")
    if wait:
        final = _wait_for(client, job, timeout)
        raise typer.Exit(0 if final["status"] == "SUCCEEDED" else 1)


def _wait_for(client: ApiClient, job: dict[str, Any], timeout: float | None) -> dict[str, Any]:
    deadline = None if timeout is None else time.monotonic() + timeout
    seen = (job["status"], job["reason"])
    while job["status"] not in TERMINAL:
        if deadline is not None and time.monotonic() > deadline:
            raise _fail(f"gave up waiting after {timeout:g}s; job {job['id']} is {job['status']}")
        time.sleep(1.0)
        job = _call(client.get, f"/v1/jobs/{job['id']}")
        if (job["status"], job["reason"]) != seen:
            seen = (job["status"], job["reason"])
            _say(f"job {job['id']} {job['status']}: {job['reason']}")
    return job


@jobs_app.command("list")
def jobs_list(
    status: Annotated[
        list[str] | None, typer.Option(help="Only these statuses (repeatable).")
    ] = None,
    project: Annotated[str | None, typer.Option(help="Only this project.")] = None,
    name: Annotated[str | None, typer.Option(help="Only jobs with this name.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="Jobs per page.")] = 50,
    all_pages: Annotated[bool, typer.Option("--all", help="Fetch every page.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List jobs, newest first."""
    client = State.client()
    params: dict[str, Any] = {"project": project, "name": name, "limit": limit}
    if status:
        params["status"] = [s.upper() for s in status]
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = _call(client.get, "/v1/jobs", **params, cursor=cursor)
        items += page["items"]
        cursor = page["next_cursor"]
        if not all_pages or not cursor:
            break
    if as_json:
        typer.echo(json.dumps(items, indent=2))
    else:
        print_jobs(items)
        if cursor:
            _say("more jobs: use --all")


@jobs_app.command("get")
def jobs_get(
    job_id: str,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show one job."""
    job = _call(State.client().get, f"/v1/jobs/{job_id}")
    if as_json:
        typer.echo(json.dumps(job, indent=2))
    else:
        print_job(job)


@jobs_app.command("cancel")
def jobs_cancel(job_id: str) -> None:
    """Cancel a job (QUEUED jobs end at once; running ones are stopped)."""
    job = _call(State.client().post, f"/v1/jobs/{job_id}/cancel")
    typer.echo(f"job {job['id']} {job['status']}: {job['reason']}")


@jobs_app.command("events")
def jobs_events(
    job_id: str,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show a job's status history."""
    client = State.client()
    events: list[dict[str, Any]] = []
    after = None
    while True:
        page = _call(client.get, f"/v1/jobs/{job_id}/events", after=after)
        events += page["items"]
        after = page["next_after"]
        if after is None:
            break
    if as_json:
        typer.echo(json.dumps(events, indent=2))
    else:
        print_events(events)


# --- projects --------------------------------------------------------------------


@projects_app.command("list")
def projects_list() -> None:
    """List projects."""
    for project in _call(State.client().get, "/v1/projects")["items"]:
        typer.echo(f"{project['name']}\t{project['description']}")


@projects_app.command("create")
def projects_create(
    name: str,
    description: Annotated[str, typer.Option(help="What the project is for.")] = "",
) -> None:
    """Create a project."""
    project = _call(State.client().post, "/v1/projects", {"name": name, "description": description})
    typer.echo(project["id"])


def main() -> None:
    app(prog_name="trainplane")


if __name__ == "__main__":
    sys.exit(main())
