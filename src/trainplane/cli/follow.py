"""Following a job's logs: the server-sent events of ``/v1/jobs/{id}/logs?follow=true``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import typer

from trainplane.cli.client import ApiClient, ApiError
from trainplane.cli.common import TERMINAL, say


@dataclass(frozen=True)
class Event:
    name: str
    data: str


def events(lines: Iterator[str]) -> Iterator[Event]:
    name, data = "message", []
    for line in lines:
        if line == "":
            if data:
                yield Event(name, "\n".join(data))
            name, data = "message", []
        elif line.startswith(":"):
            continue  # keep-alive comment
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


def follow_logs(client: ApiClient, job_id: str) -> dict[str, str]:
    """Print the job's logs as they come; returns the final status event."""
    try:
        with client.stream("GET", f"/v1/jobs/{job_id}/logs", params={"follow": "true"}) as lines:
            for event in events(lines):
                if event.name == "log":
                    typer.echo(event.data)
                elif event.name == "status":
                    status = json.loads(event.data)
                    if status["status"] not in TERMINAL:  # the end event reports those
                        say(f"job {job_id} {status['status']}: {status['reason']}")
                elif event.name == "attempt":
                    attempt = json.loads(event.data)
                    say(f"--- attempt {attempt['number']} on cluster {attempt['cluster']} ---")
                elif event.name == "end":
                    return json.loads(event.data)
    except httpx.HTTPError as exc:
        raise ApiError(0, f"the log stream broke off: {exc}") from None
    raise ApiError(0, "the log stream ended before the job did")
