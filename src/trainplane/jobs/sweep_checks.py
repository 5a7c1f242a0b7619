"""The rules of a sweep that span its fields, checked at parse so that a submit
is refused with the field to fix rather than a trial failing later: the
template's kind and fields, each parameter's path and space (tried through the
trial spec with each of its values, or both ends of its distribution), the
grid against ``search.trials``, ``search.parallel`` against the trials, and
an objective a trial can report."""

from __future__ import annotations

import itertools
import json
import math
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails

from trainplane.jobs.spec_fields import SpecError
from trainplane.jobs.spec_paths import PathError, get_path, split_path
from trainplane.jobs.sweep_errors import field_error, raise_errors
from trainplane.jobs.sweep_spec import MAX_TRIALS, TrialPathError

if TYPE_CHECKING:
    from trainplane.jobs.sweep_spec import SweepParameter, SweepSpec

TRIAL_KINDS = ("train", "finetune")
# Fields the sweep sets on every trial itself.
SET_BY_SWEEP = {
    "name": "trials are named after the sweep: <name>-<number>",
    "project": "trials run in the sweep's project",
    "register_model": "the sweep's register_model registers the best trial's model",
}
# Past this many combinations, each parameter's values are tried one at a
# time (the others at their first value) rather than every combination.
MAX_COMBINATIONS_CHECKED = 1024
# What the finetune recipe reports: every step, with an eval split, and the
# runtime's own figures.
FINETUNE_METRICS = ("loss", "learning_rate")
FINETUNE_EVAL_METRICS = ("eval_loss", "perplexity")
RUNTIME_METRICS = (
    *("step_time_s", "samples_per_s", "tokens_per_s"),
    *("gpu_utilization", "gpu_memory_gb_max", "gpu_memory_gb_mean"),
)

TrialError = tuple[tuple[str | int, ...], str, str]  # (loc in the trial, message, type)


def check_sweep(spec: SweepSpec) -> None:
    """Raise one ValidationError naming every field at fault."""
    raise_errors("SweepSpec", _template_errors(spec))
    raise_errors("SweepSpec", _path_errors(spec))
    raise_errors("SweepSpec", _search_errors(spec))
    raise_errors("SweepSpec", _unswept_errors(spec))
    errors = []
    for path, parameter in spec.parameters.items():
        errors += _parameter_errors(spec, path, parameter)
    raise_errors("SweepSpec", errors)
    raise_errors("SweepSpec", _combination_errors(spec))
    raise_errors("SweepSpec", _objective_errors(spec))


def _template_errors(spec: SweepSpec) -> list[InitErrorDetails]:
    kind = spec.trial.get("kind")
    if kind not in TRIAL_KINDS:
        given = "missing" if kind is None else f"{kind!r}"
        return [field_error(("trial", "kind"), f"must be train or finetune ({given})")]
    if len(spec.name) > 120:
        return [field_error(("name",), "at most 120 characters: trials are named <name>-<number>")]
    return [
        field_error(("trial", key), f"set by the sweep, not the trial: {why}")
        for key, why in SET_BY_SWEEP.items()
        if key in spec.trial
    ]


def _path_errors(spec: SweepSpec) -> list[InitErrorDetails]:
    errors = []
    parts_of: dict[str, list[str]] = {}
    for path in spec.parameters:
        try:
            parts_of[path] = split_path(path)
        except PathError as exc:
            errors.append(field_error(("parameters", path), str(exc)))
            continue
        if path != path.strip():
            errors.append(field_error(("parameters", path), "a path has no spaces around it"))
        elif parts_of[path][0] in ("kind", *SET_BY_SWEEP):
            errors.append(field_error(("parameters", path), "set by the sweep, not a parameter"))
    for path, parts in parts_of.items():
        for other, other_parts in parts_of.items():
            if other != path and parts[: len(other_parts)] == other_parts:
                errors.append(field_error(("parameters", path), f"inside parameter {other}"))
                break
    return errors


def _search_errors(spec: SweepSpec) -> list[InitErrorDetails]:
    search = spec.search
    errors = []
    if search.algorithm == "grid":
        errors = [
            field_error(
                ("parameters", path), "grid search takes values; a distribution has no grid"
            )
            for path, parameter in spec.parameters.items()
            if parameter.values is None
        ]
        if errors:
            return errors
        size = spec.grid_size
        if search.trials is None and size > MAX_TRIALS:
            message = f"the grid has {size} combinations, more than {MAX_TRIALS} trials"
            return [field_error(("search", "trials"), message)]
        if search.trials is not None and search.trials < size:
            return [
                field_error(
                    ("search", "trials"),
                    f"{search.trials} trials cannot cover the grid's {size} combinations "
                    "(omit trials to run each once)",
                )
            ]
    search.trials = spec.trial_count  # stored explicit: the default depends on the grid
    if search.parallel > spec.trial_count:
        errors.append(
            field_error(
                ("search", "parallel"),
                f"{search.parallel} at once is more than the sweep's {spec.trial_count} trials",
            )
        )
    return errors


def _unswept_errors(spec: SweepSpec) -> list[InitErrorDetails]:
    """The template's own errors: those inside no parameter's path (a
    parameter may fill in what the template lacks)."""
    return [
        field_error(("trial", *loc), message, kind)
        for loc, message, kind in trial_errors(spec, {})
        if not _owners(spec, loc)
    ]


def _parameter_errors(
    spec: SweepSpec, path: str, parameter: SweepParameter
) -> list[InitErrorDetails]:
    """Each value (or each end of the distribution, and a point between for
    uniform) set alone in the template. An error inside another parameter's
    path is that one's to fill in."""
    points = parameter.points
    if parameter.distribution == "uniform":
        points.append(parameter.low + (parameter.high - parameter.low) / math.pi)  # type: ignore[operator]
    for value in points:
        problems = [
            (loc, message, kind)
            for loc, message, kind in trial_errors(spec, {path: value})
            if path in _owners(spec, loc) or not _owners(spec, loc)
        ]
        if problems:
            loc, message, kind = problems[0]
            described = _described(path, loc, message, kind)
            if kind not in ("extra_forbidden", "path"):
                prefix = (
                    f"{parameter.distribution} cannot apply to {path}"
                    if parameter.distribution is not None
                    else f"value {json.dumps(value)}"
                )
                described = f"{prefix}: {described}"
            return [field_error(("parameters", path), described)]
        if parameter.distribution is not None:
            problem = _number_problem(spec, {path: value}, path, parameter.distribution)
            if problem:
                return [field_error(("parameters", path), problem)]
    return []


def _number_problem(
    spec: SweepSpec, assignment: dict[str, Any], path: str, distribution: str
) -> str | None:
    """A distribution draws numbers: the field must keep them as numbers, and
    keep uniform's fractions."""
    try:
        kept = get_path(trial_dump(spec, assignment), split_path(path))
    except (ValidationError, SpecError, KeyError):
        return None  # another parameter's value is needed first: the combinations tell
    if isinstance(kept, bool) or not isinstance(kept, int | float):
        return f"{distribution} cannot apply to {path}: it is not a number field"
    if distribution == "uniform" and not isinstance(kept, float):
        return f"uniform cannot apply to {path}: it takes whole numbers (use int_uniform)"
    return None


def _combination_errors(spec: SweepSpec) -> list[InitErrorDetails]:
    """Every combination when there are few enough, else the first values
    together: two values may each be valid and not together (precision fp16
    with strategy fsdp)."""
    spaces = [p.points for p in spec.parameters.values()]
    if len(spaces) < 2:
        return []
    if math.prod(len(s) for s in spaces) > MAX_COMBINATIONS_CHECKED:
        spaces = [s[:1] for s in spaces]
    paths = list(spec.parameters)
    for combination in itertools.product(*spaces):
        assignment = dict(zip(paths, combination, strict=True))
        problems = trial_errors(spec, assignment)
        if problems:
            loc, message, kind = problems[0]
            where = ".".join(str(p) for p in loc) or "the trial"
            values = ", ".join(f"{p}={json.dumps(v)}" for p, v in assignment.items())
            return [field_error(("parameters",), f"{values} together: {where}: {message}", kind)]
    return []


def _objective_errors(spec: SweepSpec) -> list[InitErrorDetails]:
    """A train function reports what it likes; the finetune recipe reports
    what it knows, its eval metrics only with an eval split."""
    if spec.trial_kind != "finetune":
        return []
    metric = spec.objective.metric
    known = (*FINETUNE_METRICS, *FINETUNE_EVAL_METRICS, *RUNTIME_METRICS)
    if metric not in known:
        return [
            field_error(
                ("objective", "metric"),
                f"a finetune trial does not report {metric!r}; it reports " + ", ".join(known),
            )
        ]
    base = {path: parameter.points[0] for path, parameter in spec.parameters.items()}
    document = spec.trial_document(base, 1)
    dataset = document.get("dataset")
    if metric in FINETUNE_EVAL_METRICS and not (isinstance(dataset, dict) and dataset.get("eval")):
        return [
            field_error(
                ("objective", "metric"),
                f"{metric} is reported only with an eval split: set trial.dataset.eval",
            )
        ]
    return []


def trial_errors(spec: SweepSpec, assignment: dict[str, Any]) -> list[TrialError]:
    """The errors of the trial with ``assignment`` set, at their path in the trial."""
    try:
        spec.trial_spec(assignment, 1)
    except TrialPathError as exc:
        return [(tuple(exc.path.split(".")), exc.reason, "path")]
    except ValidationError as exc:
        return [(tuple(e["loc"]), e["msg"], e["type"]) for e in exc.errors()]
    return []


def trial_dump(spec: SweepSpec, assignment: dict[str, Any]) -> dict[str, Any]:
    return spec.trial_spec(assignment, 1).model_dump(mode="json")


def _owners(spec: SweepSpec, loc: tuple[str | int, ...]) -> set[str]:
    """The parameters whose path holds ``loc``, or lies inside it."""
    where = [str(part) for part in loc]
    if not where:
        return set()
    return {
        path
        for path in spec.parameters
        if where[: len(parts := path.split("."))] == parts or parts[: len(where)] == where
    }


def _described(path: str, loc: tuple[str | int, ...], message: str, kind: str) -> str:
    where = ".".join(str(p) for p in loc)
    if kind == "extra_forbidden":
        return f"not a field of the trial spec ({where} is unknown)"
    if kind == "path":
        return f"not a field of the trial spec: {message}"
    if where and where != path:
        return f"{where}: {message}"
    return message
