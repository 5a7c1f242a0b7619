"""What a sweep's page shows: its trials as a table (a column per swept
parameter), and the objective against each parameter as charts.

The trials come from ``GET /v1/jobs/{id}/trials``; how each parameter was
searched (its distribution) from the sweep's spec, so that a log-uniform one
is charted on a log axis and a list of words on a category axis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainplane.dashboard.formatting import NOTHING

# How a parameter's axis is drawn (charts.js scatterChart's ``scale``).
LOG, LINEAR, CATEGORY = "log", "linear", "category"


@dataclass(frozen=True)
class SweptParameter:
    path: str  # as --set takes it: entrypoint.args.lr
    space: str  # the space, in words: log_uniform 1e-05 … 0.3
    scale: str  # LOG, LINEAR or CATEGORY


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def swept_parameters(spec: dict[str, Any]) -> list[SweptParameter]:
    found = []
    for path, space in (spec.get("parameters") or {}).items():
        distribution = space.get("distribution")
        if distribution:
            words = f"{distribution} {space.get('low'):g} … {space.get('high'):g}"
            scale = LOG if distribution == "log_uniform" else LINEAR
        else:
            values = space.get("values") or []
            words = "one of " + ", ".join(str(v) for v in values)
            scale = LINEAR if values and all(_is_number(v) for v in values) else CATEGORY
        found.append(SweptParameter(path, words, scale))
    return found


def sort_value(value: Any) -> str:
    """What a table cell sorts by (app.js): numbers by value, the rest as text;
    an empty string sorts after everything."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return repr(float(value)) if _is_number(value) else str(value)


def shown(value: Any) -> str:
    if value is None:
        return NOTHING
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).lower() if isinstance(value, bool) else str(value)


def counts_line(counts: dict[str, int] | None) -> str:
    """``3 succeeded, 5 pruned, 0 failed, 1 running``, in that order."""
    if not counts:
        return ""
    order = ["succeeded", "pruned", "failed", "running"]
    states = order + sorted(set(counts) - set(order))
    return ", ".join(f"{counts.get(state, 0)} {state}" for state in states if state in counts)


def sweep_context(job: dict[str, Any], trials: dict[str, Any]) -> dict[str, Any]:
    """The template's view of a sweep: its parameters, trials and best."""
    parameters = swept_parameters(job.get("spec") or {})
    best = trials.get("best_trial") or job.get("best_trial")
    best_id = best["id"] if best else None
    items = sorted(trials.get("items", []), key=lambda t: t["number"])
    chart = {
        "metric": trials["objective"]["metric"],
        "mode": trials["objective"]["mode"],
        "trials": [
            {
                "id": t["id"],
                "name": t["name"],
                "number": t["number"],
                "status": t["status"],
                "value": t.get("last_value"),
                "best": t["id"] == best_id,
                "parameters": t.get("parameters") or {},
            }
            for t in items
        ],
    }
    return {
        "parameters": parameters,
        "objective": trials["objective"],
        "trials": items,
        "best": best,
        "counts": counts_line(job.get("trials")),
        "chart": chart,
    }
