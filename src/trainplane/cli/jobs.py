"""``jobs list|get|cancel|events|logs|metrics|checkpoints|compare|trials``.

Wherever a job id goes, a unique id prefix (6+ characters) or a job name (the
newest job of that name) does too: the server resolves it (``-p/--project``
narrows a name to one project)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from trainplane.cli.common import (
    EXIT_FAILED,
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
    JsonFlag,
    OutputChoice,
    OutputOption,
    emit,
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

JobRef = Annotated[
    str,
    typer.Argument(
        metavar="JOB",
        help="The job's id, a unique prefix of it (6+ characters), or its name (the newest "
        "job of that name).",
        show_default=False,
    ),
]
RefProject = Annotated[
    str | None,
    typer.Option("--project", "-p", help="Look the job's name up in this project only."),
]
# Job ids: 26 characters (trainplane.ids); anything else is resolved once.
_ID_LENGTH = 26


def job_id_of(client: Session, ref: str, project: str | None = None) -> str:
    """The id ``ref`` stands for (the server resolves names and prefixes), so
    that a command of several requests reads one job throughout."""
    if project is None and len(ref) == _ID_LENGTH:
        return ref
    return call(client.get, f"/v1/jobs/{ref}", project=project)["id"]


@jobs_app.command("list")
def jobs_list(
    status: Annotated[
        list[str] | None,
        typer.Option("--status", "-s", help="Only these statuses (repeatable)."),
    ] = None,
    project: Annotated[
        str | None, typer.Option("--project", "-p", help="Only this project.")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Only jobs with this name.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="Jobs per page.")] = 50,
    all_pages: Annotated[bool, typer.Option("--all", help="Fetch every page.")] = False,
    output: OutputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """List jobs, newest first."""
    fmt = OutputChoice.of(output, as_json)
    client = State.client()
    params: dict[str, Any] = {"project": project, "name": name, "limit": limit}
    if status:
        params["status"] = [s.upper() for s in status]
    fetched = list(pages(client, "/v1/jobs", params, all_pages=all_pages))
    items = [job for page in fetched for job in page["items"]]
    if not items and project is not None:
        _require_project(client, project)
    emit(items, fmt, print_jobs)
    if fmt == "table" and fetched[-1]["next_cursor"]:
        say("more jobs: use --all")


def _require_project(client: Session, name: str) -> None:
    known = {p["name"] for p in call(client.get, "/v1/projects")["items"]}
    if name not in known:
        raise fail(
            f"project '{name}' does not exist (or you cannot see it); "
            "trainplane projects list shows yours",
            EXIT_FAILED,
        )


@jobs_app.command("get")
def jobs_get(
    job: JobRef,
    project: RefProject = None,
    output: OutputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Show one job: status, attempts, progress, metrics and its spec."""
    found = call(State.client().get, f"/v1/jobs/{job}", project=project)
    emit(found, OutputChoice.of(output, as_json), print_job)


@jobs_app.command("cancel")
def jobs_cancel(job: JobRef, project: RefProject = None, output: OutputOption = None) -> None:
    """Cancel a job (QUEUED jobs end at once; running ones are stopped).
    Cancelling a job that is cancelled already succeeds, saying so."""
    client = State.client()
    job_id = job_id_of(client, job, project)
    try:
        done = client.post(f"/v1/jobs/{job_id}/cancel")
    except TrainplaneError as exc:
        current = call(client.get, f"/v1/jobs/{job_id}") if exc.status == 409 else {}
        if current.get("status") != "CANCELLED":
            raise fail(refusal(exc), exit_code_for(exc)) from None
        say(f"job {job_id} already cancelled: {current['reason']}")
        done = current
    emit(
        done,
        OutputChoice.of(output),
        lambda j: typer.echo(f"job {j['id']} {j['status']}: {j['reason']}"),
    )


@jobs_app.command("events")
def jobs_events(
    job: JobRef,
    project: RefProject = None,
    output: OutputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Show a job's status history."""
    client = State.client()
    job_id = job_id_of(client, job, project)
    events: list[dict[str, Any]] = []
    after = None
    while True:
        page = call(client.get, f"/v1/jobs/{job_id}/events", after=after)
        events += page["items"]
        after = page["next_after"]
        if after is None:
            break
    emit(events, OutputChoice.of(output, as_json), print_events)


@jobs_app.command("logs")
def jobs_logs(
    job: JobRef,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream every attempt's log until the job ends.")
    ] = False,
    attempt: Annotated[
        int | None, typer.Option(min=1, help="Attempt number (default: latest).")
    ] = None,
    project: RefProject = None,
) -> None:
    """Print a job's log. A job that has not started yet has none: stdout
    stays empty, stderr says why it waits, and the exit code is 0 (nothing
    went wrong; --follow waits for the log)."""
    client = State.client()
    job_id = job_id_of(client, job, project)
    if follow:
        try:
            final = follow_logs(client, job_id)
        except TrainplaneError as exc:
            raise fail(refusal(exc), exit_code_for(exc)) from None
        say(f"job {job_id} {final['status']}: {final['reason']}")
        raise typer.Exit(exit_code_for_status(final["status"]))
    text = call(client.text, f"/v1/jobs/{job_id}/logs", attempt=attempt)
    if not text:
        current = call(client.get, f"/v1/jobs/{job_id}")
        if current["status"] == "QUEUED" or not current.get("attempts"):
            say(
                f"job {job_id} is {current['status']} and has not started, so it has no log "
                f"yet: {current['reason']} (trainplane jobs logs {job_id} --follow waits for it)"
            )
        else:
            say(f"job {job_id} ({current['status']}): its log is empty so far")
    typer.echo(text, nl=False)


@jobs_app.command("metrics")
def jobs_metrics(
    job: JobRef,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Points per page.")] = 1000,
    all_pages: Annotated[bool, typer.Option("--all", help="Fetch every page.")] = False,
    project: RefProject = None,
    output: OutputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Show a job's progress and metric points, oldest first."""
    fmt = OutputChoice.of(output, as_json)
    client = State.client()
    job_id = job_id_of(client, job, project)
    page = call(client.get, f"/v1/jobs/{job_id}/metrics", limit=limit)
    points = page["points"]
    cursor = page["next_cursor"]
    while all_pages and cursor:
        more = call(client.get, f"/v1/jobs/{job_id}/metrics", limit=limit, cursor=cursor)
        points += more["points"]
        cursor = more["next_cursor"]
    whole = {**page, "points": points, "next_cursor": cursor}
    emit(whole, fmt, lambda m: print_metrics(m["progress"], m["points"]))
    if fmt == "table" and cursor:
        say("more points: use --all")


@jobs_app.command("checkpoints")
def jobs_checkpoints(
    job: JobRef,
    project: RefProject = None,
    output: OutputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """List a job's complete checkpoints, newest first."""
    client = State.client()
    listing = call(client.get, f"/v1/jobs/{job_id_of(client, job, project)}/checkpoints")
    emit(listing, OutputChoice.of(output, as_json), print_checkpoints)


@jobs_app.command("compare")
def jobs_compare(
    jobs: Annotated[
        list[str],
        typer.Argument(metavar="JOB...", help="Two or more jobs: ids, id prefixes or names."),
    ],
    output: OutputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Show how jobs' specs differ and their final metrics, side by side."""
    comparison = call(State.client().get, "/v1/jobs/compare", ids=",".join(jobs))
    emit(comparison, OutputChoice.of(output, as_json), print_comparison)


@jobs_app.command("trials")
def jobs_trials(
    sweep: Annotated[
        str,
        typer.Argument(
            metavar="SWEEP", help="The sweep's id, a unique prefix of it, or its name (its newest)."
        ),
    ],
    project: RefProject = None,
    output: OutputOption = None,
) -> None:
    """List a sweep's trials: parameters, status, objective (last and best) and
    step, by number; the best trial is marked."""
    client = State.client()
    listing = call(client.get, f"/v1/jobs/{job_id_of(client, sweep, project)}/trials")
    emit(listing, OutputChoice.of(output), lambda data: print_trials(data, typer.echo))
