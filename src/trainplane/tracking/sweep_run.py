"""What a sweep's MLflow run holds: its search space, search and early stop
as parameters, the best objective so far as a metric, and the trial counts as
tags. Pure code.

A sweep's run is the parent of its trials' runs (each trial's run carries the
tag ``mlflow.parentRunId``), so MLflow shows the trials nested under it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainplane.tracking.run_data import MAX_PARAM_VALUE, TAG, key

PARENT_TAG = "mlflow.parentRunId"
# The parts of a sweep's spec that say how it searches, beside its parameters.
SEARCH_PARTS = ("objective", "search", "early_stop")


@dataclass(frozen=True)
class SweepFacts:
    """What a tracking pass knows of a sweep: its trials, the best so far,
    their GPU time, and where the best trial's exported model is."""

    metric: str
    best_trial_id: str | None = None
    best_trial_name: str | None = None
    best_value: float | None = None
    counts: dict[str, int] = field(default_factory=dict)  # sweep_search.counts
    gpu_hours: float = 0.0
    cost: float = 0.0
    lost_gpu_hours: float = 0.0
    best_model_root: str | None = None
    # Every trial it will make exists and has ended: the best is final.
    settled: bool = False

    @property
    def ended(self) -> int:
        return sum(n for state, n in self.counts.items() if state != "running")


def space(parameter: Mapping[str, Any]) -> str:
    """A parameter's search space as one line: ``log_uniform(1e-05, 0.3)``,
    ``values [16, 32, 64]``."""
    if parameter.get("distribution"):
        low, high = parameter.get("low"), parameter.get("high")
        return f"{parameter['distribution']}({low:g}, {high:g})"
    return "values " + json.dumps(parameter.get("values"))


def sweep_params(spec: Mapping[str, Any]) -> dict[str, str]:
    """The sweep's parameters: each swept path (as its trials' runs name it)
    with its space, then how it searches and stops trials early."""
    params = {key(path): space(p) for path, p in (spec.get("parameters") or {}).items()}
    for part in SEARCH_PARTS:
        for name, value in (spec.get(part) or {}).items():
            if value is not None:
                text = value if isinstance(value, str) else json.dumps(value)
                params[key(f"{part}.{name}")] = text[:MAX_PARAM_VALUE]
    return params


def sweep_signature(facts: SweepFacts) -> str:
    """Changes whenever the run's metric or tags should: kept in the
    tracking row's ``synced_attempts`` (a sweep has no attempts)."""
    counts = ",".join(f"{state}={n}" for state, n in sorted(facts.counts.items()))
    text = f"sweep {counts} best={facts.best_trial_id}:{facts.best_value!r}"
    return "sweep " + hashlib.sha256(text.encode()).hexdigest()[:32]


def sweep_tags(facts: SweepFacts) -> dict[str, str]:
    tags = {f"{TAG}trials.{state}": str(n) for state, n in sorted(facts.counts.items())}
    if facts.best_trial_id:
        tags[f"{TAG}best_trial"] = facts.best_trial_id
        if facts.best_trial_name:
            tags[f"{TAG}best_trial_name"] = facts.best_trial_name
    return tags


def best_metric(facts: SweepFacts) -> str:
    return key(f"best_{facts.metric}")
