"""The search and pruning engine of sweeps: what a sweep's trials did, as the
database holds it, and the decisions taken from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class TrialRecord:
    number: int  # 1-based
    parameters: dict[str, Any]
    state: Literal["running", "succeeded", "pruned", "failed"]  # running: not ended
    value: float | None  # the final objective (last reported) when succeeded
    intermediate: dict[int, float]  # the objective at decision steps
    search_state: dict[str, Any]  # what the engine asked to keep; opaque
