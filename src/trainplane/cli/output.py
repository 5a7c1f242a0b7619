"""Plain-text rendering of jobs and events for terminals."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import typer


def _when(value: str | None) -> str:
    if not value:
        return "-"
    return datetime.fromisoformat(value).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        typer.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def print_jobs(jobs: list[dict[str, Any]]) -> None:
    if not jobs:
        typer.echo("no jobs")
        return
    _table(
        [
            [
                j["id"],
                j["project"],
                j["name"],
                j["status"],
                f"{j['gpus']}x {j['strategy']}",
                _when(j["created_at"]),
                j["reason"],
            ]
            for j in jobs
        ],
        ["ID", "PROJECT", "NAME", "STATUS", "GPUS", "CREATED", "REASON"],
    )


def print_job(job: dict[str, Any]) -> None:
    for key in ("id", "name", "project", "kind", "status", "reason", "priority", "submitted_by"):
        typer.echo(f"{key + ':':14}{job[key]}")
    if job.get("queue_position"):
        typer.echo(f"{'queue:':14}position {job['queue_position']}")
    typer.echo(f"{'resources:':14}{job['gpus']} GPUs, {job['strategy']}")
    for key in ("created_at", "started_at", "finished_at"):
        typer.echo(f"{key + ':':14}{_when(job[key])}")
    for attempt in job.get("attempts", []):
        code = "" if attempt["exit_code"] is None else f", exit code {attempt['exit_code']}"
        typer.echo(
            f"{'attempt ' + str(attempt['number']) + ':':14}{attempt['status']} on "
            f"{attempt['cluster'] or '-'}{code} {attempt['reason']}".rstrip()
        )
    typer.echo("spec:")
    typer.echo(json.dumps(job["spec"], indent=2))


def print_events(events: list[dict[str, Any]]) -> None:
    _table(
        [
            [_when(e["created_at"]), e["from_status"] or "-", e["to_status"], e["reason"]]
            for e in events
        ],
        ["TIME", "FROM", "TO", "REASON"],
    )
