"""Per-step timestamps, as bare_lm.py and trainplane's metrics file write them,
and the two figures the overhead benchmarks take from them."""

from __future__ import annotations

import json
from pathlib import Path


def read_points(path: Path) -> list[tuple[int, float]]:
    points = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(p["step"], p["time"]) for p in points]


def summarise(points: list[tuple[int, float]], started: float, skip: int) -> tuple[float, float]:
    """(steps per second after ``skip`` steps, seconds from start to the first step)."""
    steady = [p for p in points if p[0] > skip]
    rate = (steady[-1][0] - steady[0][0]) / (steady[-1][1] - steady[0][1])
    return rate, points[0][1] - started
