"""Reading a job trace: the Philly format (``timestamp,duration,num_gpus,
gpu_time,cluster``), each virtual cluster standing for a project."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path


@dataclass(frozen=True)
class TraceJob:
    id: str
    submit: float  # seconds since the trace's first submission
    duration: float  # seconds of run time once started
    gpus: int
    project: str


def read_philly(path: Path, *, days: float | None = None) -> list[TraceJob]:
    """The trace's jobs by submit time; with ``days``, only the first ``days``
    of submissions."""
    rows = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            submitted = datetime.fromisoformat(row["timestamp"]).replace(tzinfo=UTC).timestamp()
            rows.append((submitted, float(row["duration"]), int(row["num_gpus"]), row["cluster"]))
    rows.sort()
    first = rows[0][0] if rows else 0.0
    jobs = [
        TraceJob(f"j{index:06d}", submit - first, duration, gpus, project)
        for index, (submit, duration, gpus, project) in enumerate(rows)
    ]
    if days is not None:
        jobs = [job for job in jobs if job.submit < days * 86400]
    return jobs
