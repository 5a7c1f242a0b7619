"""``submit`` and ``jobs list|get|cancel|events|logs|metrics|checkpoints|compare``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from trainplane.cli.client import ApiClient, ApiError
from trainplane.cli.common import TERMINAL, State, call, fail, pages, say
from trainplane.cli.follow import follow_logs
from trainplane.cli.output import (
    describe_model,
    describe_tracking,
    print_checkpoints,
    print_comparison,
    print_events,
    print_job,
    print_jobs,
    print_metrics,
)
from trainplane.cli.specfile import SpecFileError, load_spec_file

jobs_app = typer.Typer(no_args_is_help=True, help="Inspect and control jobs.")

# After a job ends, --wait waits this long (by default) for its MLflow run to be
# closed and its model registered.
TRACKING_WAIT_SECONDS = 120.0


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
    follow: Annotated[
        bool, typer.Option(help="Print the job's logs until it ends (implies --wait).")
    ] = False,
    timeout: Annotated[
        float | None, typer.Option(help="Give up waiting after this many seconds.")
    ] = None,
    tracking_timeout: Annotated[
        float,
        typer.Option(
            help="With --wait or --follow: once the job ended, wait this long for its MLflow "
            "run to be complete and its model registered."
        ),
    ] = TRACKING_WAIT_SECONDS,
) -> None:
    """Submit a job; prints its id."""
    try:
        spec = load_spec_file(file, set_ or [])
    except SpecFileError as exc:
        raise fail(str(exc), 2) from None
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    client = State.client()
    job = call(client.post, "/v1/jobs", spec, headers=headers)
    typer.echo(job["id"])
    say(f"job {job['id']} ({job['name']}) {job['status']}: {job['reason']}")
    if follow:
        call(follow_logs, client, job["id"])
        _report_end(client, job["id"], tracking_timeout)
    if wait:
        _wait_for(client, job, timeout)
        _report_end(client, job["id"], tracking_timeout)


def _report_end(client: ApiClient, job_id: str, tracking_timeout: float) -> None:
    final = _wait_for_tracking(client, call(client.get, f"/v1/jobs/{job_id}"), tracking_timeout)
    say(f"job {job_id} {final['status']}: {final['reason']}")
    tracking = final["tracking"]
    if tracking["run_id"]:
        say(f"mlflow {describe_tracking(tracking)}")
    if final.get("registered_model"):
        say(f"registered model {describe_model(final['registered_model'])}")
    if tracking["error"]:
        say(f"mlflow: {tracking['error']}")
    say(f"logs: trainplane jobs logs {job_id}   events: trainplane jobs events {job_id}")
    raise typer.Exit(0 if final["status"] == "SUCCEEDED" else 1)


def _wait_for_tracking(client: ApiClient, job: dict[str, Any], timeout: float) -> dict[str, Any]:
    """An ended job's run is closed (and its model registered) by the tracking
    loop a moment later; wait for that, a bounded time, so what is printed is
    final. A job's tracking never fails it: on time-out the run is completed
    in the background."""
    deadline = time.monotonic() + timeout
    shown = None
    while job["tracking"]["status"] in ("pending", "active"):
        error = job["tracking"]["error"]
        if error and error != shown:
            say(f"mlflow: {error}; retrying")
            shown = error
        if time.monotonic() > deadline:
            say(f"the MLflow run is not complete after {timeout:g}s; it will be in the background")
            break
        time.sleep(0.5)
        job = call(client.get, f"/v1/jobs/{job['id']}")
    return job


def _wait_for(client: ApiClient, job: dict[str, Any], timeout: float | None) -> dict[str, Any]:
    deadline = None if timeout is None else time.monotonic() + timeout
    seen = (job["status"], job["reason"])
    while job["status"] not in TERMINAL:
        if deadline is not None and time.monotonic() > deadline:
            raise fail(f"gave up waiting after {timeout:g}s; job {job['id']} is {job['status']}")
        time.sleep(1.0)
        job = call(client.get, f"/v1/jobs/{job['id']}")
        # The end is reported once, with the run and model, by _report_end.
        if (job["status"], job["reason"]) != seen and job["status"] not in TERMINAL:
            seen = (job["status"], job["reason"])
            say(f"job {job['id']} {job['status']}: {job['reason']}")
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
    fetched = list(pages(client, "/v1/jobs", params, all_pages=all_pages))
    items = [job for page in fetched for job in page["items"]]
    cursor = fetched[-1]["next_cursor"]
    if as_json:
        typer.echo(json.dumps(items, indent=2))
    else:
        print_jobs(items)
        if cursor:
            say("more jobs: use --all")


@jobs_app.command("get")
def jobs_get(
    job_id: str,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show one job."""
    job = call(State.client().get, f"/v1/jobs/{job_id}")
    if as_json:
        typer.echo(json.dumps(job, indent=2))
    else:
        print_job(job)


@jobs_app.command("cancel")
def jobs_cancel(job_id: str) -> None:
    """Cancel a job (QUEUED jobs end at once; running ones are stopped)."""
    job = call(State.client().post, f"/v1/jobs/{job_id}/cancel")
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
        page = call(client.get, f"/v1/jobs/{job_id}/events", after=after)
        events += page["items"]
        after = page["next_after"]
        if after is None:
            break
    if as_json:
        typer.echo(json.dumps(events, indent=2))
    else:
        print_events(events)


@jobs_app.command("logs")
def jobs_logs(
    job_id: str,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream every attempt's log until the job ends.")
    ] = False,
    attempt: Annotated[
        int | None, typer.Option(min=1, help="Attempt number (default: latest).")
    ] = None,
) -> None:
    """Print a job's log."""
    client = State.client()
    if follow:
        try:
            final = follow_logs(client, job_id)
        except ApiError as exc:
            raise fail(str(exc)) from None
        say(f"job {job_id} {final['status']}: {final['reason']}")
        raise typer.Exit(0 if final["status"] == "SUCCEEDED" else 1)
    typer.echo(call(client.text, f"/v1/jobs/{job_id}/logs", attempt=attempt), nl=False)


@jobs_app.command("metrics")
def jobs_metrics(
    job_id: str,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Points per page.")] = 1000,
    all_pages: Annotated[bool, typer.Option("--all", help="Fetch every page.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show a job's progress and metric points, oldest first."""
    client = State.client()
    page = call(client.get, f"/v1/jobs/{job_id}/metrics", limit=limit)
    points = page["points"]
    cursor = page["next_cursor"]
    while all_pages and cursor:
        more = call(client.get, f"/v1/jobs/{job_id}/metrics", limit=limit, cursor=cursor)
        points += more["points"]
        cursor = more["next_cursor"]
    if as_json:
        typer.echo(json.dumps({**page, "points": points, "next_cursor": cursor}, indent=2))
        return
    print_metrics(page["progress"], points)
    if cursor:
        say("more points: use --all")


@jobs_app.command("checkpoints")
def jobs_checkpoints(
    job_id: str,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List a job's complete checkpoints, newest first."""
    listing = call(State.client().get, f"/v1/jobs/{job_id}/checkpoints")
    if as_json:
        typer.echo(json.dumps(listing, indent=2))
    else:
        print_checkpoints(listing)


@jobs_app.command("compare")
def jobs_compare(
    job_ids: Annotated[list[str], typer.Argument(help="Two or more job ids.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show how jobs' specs differ and their final metrics, side by side."""
    comparison = call(State.client().get, "/v1/jobs/compare", ids=",".join(job_ids))
    if as_json:
        typer.echo(json.dumps(comparison, indent=2))
    else:
        print_comparison(comparison)
