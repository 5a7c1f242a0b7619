"""``jobs list|get|cancel|events|logs|metrics|checkpoints|compare|trials``."""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml

from trainplane.cli.common import (
    State,
    call,
    exit_code_for,
    exit_code_for_status,
    fail,
    pages,
    refusal,
    say,
)
from trainplane.cli.follow import follow_logs
from trainplane.cli.output import (
    print_checkpoints,
    print_comparison,
    print_events,
    print_job,
    print_jobs,
    print_metrics,
)
from trainplane.cli.trials import print_trials
from trainplane.sdk.errors import TrainplaneError
from trainplane.sdk.sessions import Session

jobs_app = typer.Typer(no_args_is_help=True, help="Inspect and control jobs.")


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
        except TrainplaneError as exc:
            raise fail(refusal(exc), exit_code_for(exc)) from None
        say(f"job {job_id} {final['status']}: {final['reason']}")
        raise typer.Exit(exit_code_for_status(final["status"]))
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


# Job ids: 26 characters of lowercase Crockford base32 (trainplane.ids).
_JOB_ID = re.compile(r"[0-9a-hjkmnp-tv-z]{26}")


def job_id_of(client: Session, given: str) -> str:
    """The id of ``given``: an id as it is, else the newest job of that name
    (DESIGN.md: a job name stands for the latest job of that name)."""
    if _JOB_ID.fullmatch(given):
        return given
    page = call(client.get, "/v1/jobs", name=given, limit=1)
    return page["items"][0]["id"] if page["items"] else given


class TrialsOutput(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


@jobs_app.command("trials")
def jobs_trials(
    sweep_id: Annotated[str, typer.Argument(help="The sweep's id, or its name (its newest).")],
    output: Annotated[TrialsOutput, typer.Option(help="table, json or yaml.")] = TrialsOutput.table,
) -> None:
    """List a sweep's trials: parameters, status, objective (last and best) and
    step, by number; the best trial is marked."""
    client = State.client()
    listing = call(client.get, f"/v1/jobs/{job_id_of(client, sweep_id)}/trials")
    if output is TrialsOutput.json:
        typer.echo(json.dumps(listing, indent=2))
    elif output is TrialsOutput.yaml:
        typer.echo(yaml.safe_dump(listing, sort_keys=False), nl=False)
    else:
        print_trials(listing, typer.echo)
