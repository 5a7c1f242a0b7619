"""Synthetic job mixes to replay besides Philly, so that no policy is tuned to
one trace: heavy-tailed durations, projects made of large gangs, bursts of
submissions, and mostly long single-GPU jobs with a few 8-GPU gangs on a small
cluster.

Each mix is a set of projects, each with its share of the jobs, its gang sizes
and a log-normal duration (median and spread). The number of jobs is set so
that the work offered is ``load`` times what the mix's own cluster can do over
its days, so the queue grows and shrinks instead of staying empty.
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from trainplane.simulation.trace import TraceJob

MIN_SECONDS = 60.0
MAX_SECONDS = 30 * 86400.0


@dataclass(frozen=True)
class Project:
    name: str
    share: float  # of the mix's jobs
    gpus: tuple[tuple[int, float], ...]  # (gang size, probability)
    median_minutes: float
    sigma: float  # of log(duration): 1 is moderate, 2 heavy-tailed

    def mean_gpu_seconds(self) -> float:
        mean_gpus = sum(size * p for size, p in self.gpus) / sum(p for _, p in self.gpus)
        return mean_gpus * self.median_minutes * 60 * math.exp(self.sigma**2 / 2)


@dataclass(frozen=True)
class Mix:
    description: str
    projects: tuple[Project, ...]
    days: float
    nodes: int  # the cluster the mix is made for
    gpus_per_node: int = 8
    load: float = 0.9  # work offered / what the cluster can do
    burst_fraction: float = 0.0  # of the jobs, submitted in bursts from one project
    burst_size: int = 40

    def job_count(self) -> int:
        total = sum(p.share for p in self.projects)
        mean = sum(p.share * p.mean_gpu_seconds() for p in self.projects) / total
        capacity = self.nodes * self.gpus_per_node * self.days * 86400
        return max(1, round(self.load * capacity / mean))


SMALL = ((1, 0.8), (2, 0.15), (4, 0.05))
MIXES = {
    "heavy_tail": Mix(
        "mostly small jobs whose durations span minutes to weeks",
        (
            Project("a", 0.4, ((1, 0.7), (2, 0.15), (4, 0.1), (8, 0.05)), 15, 2.0),
            Project("b", 0.35, ((1, 0.7), (2, 0.15), (4, 0.1), (8, 0.05)), 30, 2.0),
            Project("c", 0.25, ((1, 0.5), (4, 0.3), (8, 0.2)), 10, 2.2),
        ),
        days=14,
        nodes=8,
    ),
    "gang_heavy": Mix(
        "one project of 8- to 32-GPU gangs beside two projects of small jobs",
        (
            Project("gangs", 0.2, ((8, 0.5), (16, 0.3), (32, 0.2)), 120, 1.2),
            Project("small1", 0.4, SMALL, 30, 1.5),
            Project("small2", 0.4, SMALL, 45, 1.5),
        ),
        days=14,
        nodes=8,
        load=0.95,
    ),
    "bursts": Mix(
        "half the jobs arrive in bursts of about 40 from one project",
        (
            Project("sweeps", 0.5, ((1, 0.9), (2, 0.1)), 40, 1.0),
            Project("train", 0.2, ((8, 0.6), (16, 0.4)), 240, 1.0),
            Project("dev", 0.3, SMALL, 20, 1.5),
        ),
        days=14,
        nodes=16,
        burst_fraction=0.5,
    ),
    "long_single": Mix(
        "mostly long single-GPU jobs with a few 8-GPU gangs on a small cluster",
        (
            Project("u1", 0.3, ((1, 0.97), (8, 0.03)), 360, 1.3),
            Project("u2", 0.25, ((1, 0.95), (8, 0.05)), 240, 1.3),
            Project("u3", 0.25, ((1, 1.0),), 480, 1.2),
            Project("u4", 0.2, ((1, 0.9), (8, 0.1)), 180, 1.4),
        ),
        days=30,
        nodes=4,
    ),
}


def _pick(rng: random.Random, weighted: tuple[tuple[int, float], ...]) -> int:
    sizes, weights = zip(*weighted, strict=True)
    return rng.choices(sizes, weights)[0]


def _duration(rng: random.Random, project: Project) -> float:
    seconds = rng.lognormvariate(math.log(project.median_minutes * 60), project.sigma)
    return round(min(MAX_SECONDS, max(MIN_SECONDS, seconds)))


def synthetic_trace(name: str, *, seed: int = 0, load_scale: float = 1.0) -> list[TraceJob]:
    """The jobs of mix ``name`` drawn with ``seed``, in submit order;
    ``load_scale`` multiplies the work the mix offers (more jobs over the
    same days on the same cluster)."""
    if not 0 < load_scale < math.inf:
        raise ValueError("load_scale must be a positive number")
    mix = replace(MIXES[name], load=MIXES[name].load * load_scale)
    rng = random.Random(seed)
    span = mix.days * 86400
    count = mix.job_count()
    shares = [p.share for p in mix.projects]
    drawn: list[tuple[float, Project]] = []
    bursty = round(count * mix.burst_fraction)
    while len(drawn) < bursty:
        at, project = rng.uniform(0, span), rng.choices(mix.projects, shares)[0]
        for _ in range(min(mix.burst_size, bursty - len(drawn))):
            drawn.append((min(span, at + rng.uniform(0, 600)), project))
    while len(drawn) < count:
        drawn.append((rng.uniform(0, span), rng.choices(mix.projects, shares)[0]))
    drawn.sort(key=lambda item: item[0])
    first = drawn[0][0]
    return [
        TraceJob(
            f"s{index:06d}",
            float(round(at - first)),
            _duration(rng, project),
            _pick(rng, project.gpus),
            project.name,
        )
        for index, (at, project) in enumerate(drawn)
    ]


def write_philly_csv(jobs: list[TraceJob], path: Path) -> None:
    """Writes ``jobs`` in the Philly trace's five columns, for
    :func:`trainplane.simulation.trace.read_philly` or another tool."""
    origin = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["timestamp", "duration", "num_gpus", "gpu_time", "cluster"])
        for job in jobs:
            stamp = datetime.fromtimestamp(origin + job.submit, UTC).strftime("%Y-%m-%d %H:%M:%S")
            writer.writerow([stamp, job.duration, job.gpus, job.duration * job.gpus, job.project])
