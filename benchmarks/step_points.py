"""Per-step timestamps, as bare_lm.py and trainplane's metrics file write them,
the two figures the overhead benchmarks take from them, and the table and
JSON summary they print of their medians."""

from __future__ import annotations

import json
import statistics
from pathlib import Path


def read_points(path: Path) -> list[tuple[int, float]]:
    points = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(p["step"], p["time"]) for p in points]


def summarise(points: list[tuple[int, float]], started: float, skip: int) -> tuple[float, float]:
    """(steps per second after ``skip`` steps, seconds from start to the first step)."""
    steady = [p for p in points if p[0] > skip]
    rate = (steady[-1][0] - steady[0][0]) / (steady[-1][1] - steady[0][1])
    return rate, points[0][1] - started


def medians(samples: dict[str, list[tuple[float, float]]]) -> dict[str, dict[str, float]]:
    """Per way of running: the medians of its (steps/s, first step) samples."""
    return {
        way: {
            "steps_per_s": statistics.median(rate for rate, _ in runs),
            "first_step_s": statistics.median(first for _, first in runs),
        }
        for way, runs in samples.items()
    }


def print_table(
    figures: dict[str, dict[str, float]], labels: dict[str, str], *, rate_digits: int = 1
) -> None:
    """One row per way (``labels``' order), steps/s as a ratio to the first."""
    base = figures[next(iter(labels))]["steps_per_s"]
    print(f"{'':34}{'steps/s':>9}{'ratio':>8}{'first step (s)':>16}")
    for way, label in labels.items():
        rate, first = figures[way]["steps_per_s"], figures[way]["first_step_s"]
        print(f"{label:34}{rate:>9.{rate_digits}f}{rate / base:>8.3f}{first:>16.2f}")
