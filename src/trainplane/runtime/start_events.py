"""Timestamps of an attempt's way up, for measuring where its start time goes.

When the job's ``entrypoint.env`` sets ``TRAINPLANE_START_EVENTS_FILE``, the
driver, the Ray Train workers and the rank processes each append one JSON line
per milestone (``{"event", "time", "pid"}``, wall-clock seconds) to that file;
``benchmarks/start_latency.py`` reads them back. Unset (always, outside a
measurement), marking costs one environment lookup.
"""

from __future__ import annotations

import json
import os
import time

START_EVENTS_FILE = "TRAINPLANE_START_EVENTS_FILE"


def mark(event: str, at: float | None = None) -> None:
    """Record that ``event`` happened now (or at ``at``), when asked to."""
    path = os.environ.get(START_EVENTS_FILE)
    if not path:
        return
    when = time.time() if at is None else at
    line = json.dumps({"event": event, "time": when, "pid": os.getpid()})
    try:
        # One short append per line: lines from several processes do not interleave.
        with open(path, "a") as handle:
            handle.write(line + "\n")
    except OSError:
        pass  # a measurement aid never fails the job


def process_started() -> float | None:
    """When this process was created (wall clock), before Python's imports."""
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:  # psutil comes with Ray; without it there is no such mark
        return None


def mark_process_start(event: str) -> None:
    """Record when this process was created, under ``event``."""
    if os.environ.get(START_EVENTS_FILE):
        started = process_started()
        if started is not None:
            mark(event, started)
