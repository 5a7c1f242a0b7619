"""Following a job's logs: the server-sent events of ``/v1/jobs/{id}/logs?follow=true``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import typer

from trainplane.cli.common import TERMINAL, say
from trainplane.sdk.errors import TrainplaneError
from trainplane.sdk.sessions import Session
from trainplane.sdk.sse import SseDecoder, SseEvent

# No read timeout: a followed log stays open while the job runs, and the
# caller's deadline (--timeout) is what bounds the wait.
FOLLOW_TIMEOUT = httpx.Timeout(10.0, read=None)


def events(lines: Iterator[str]) -> Iterator[SseEvent]:
    decoder = SseDecoder()
    for line in lines:
        event = decoder.feed(line)
        if event is not None:
            yield event


class DeadlinePassed(Exception):
    """The caller's deadline (``--timeout``) passed before the job ended."""


def _until(lines: Iterator[str], deadline: float | None) -> Iterator[str]:
    # The server sends a keep-alive comment at least every 15 s, so a quiet
    # job still lets the deadline be checked.
    for line in lines:
        if deadline is not None and time.monotonic() > deadline:
            raise DeadlinePassed
        yield line


def follow_logs(
    client: Session,
    job_id: str,
    *,
    deadline: float | None = None,
    logs_to_stderr: bool = False,
) -> dict[str, str]:
    """Print the job's logs as they come (on stdout unless ``logs_to_stderr``);
    returns the final status event. Raises DeadlinePassed after ``deadline``
    (``time.monotonic()``)."""
    try:
        with client.lines(
            method="GET",
            url=f"/v1/jobs/{job_id}/logs",
            params={"follow": "true"},
            timeout=FOLLOW_TIMEOUT,
        ) as lines:
            for event in events(_until(lines, deadline)):
                if event.name == "log":
                    typer.echo(event.data, err=logs_to_stderr)
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
        raise TrainplaneError(0, f"the log stream broke off: {exc}") from None
    raise TrainplaneError(0, "the log stream ended before the job did")
