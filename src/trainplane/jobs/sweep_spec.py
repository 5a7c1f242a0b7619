"""The spec of a sweep (``kind: sweep``): a trial template
(a train or finetune spec without name and project), the parameters to search
by the paths ``--set`` takes, the objective, the search and the early stop.

Each trial is an ordinary job whose spec is :meth:`SweepSpec.trial_spec`: the
template with every parameter set to the trial's value. Validation at parse
(``trainplane.jobs.sweep_checks``) tries the template with the parameters'
values, so every error a trial could meet is named at submit, by its field.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from trainplane.jobs.progress import MetricName
from trainplane.jobs.spec_fields import JobName, JsonObject, ProjectName, SpecError, Strict
from trainplane.jobs.spec_paths import PathError, set_path, split_path
from trainplane.jobs.spec_sections import RegisterModel
from trainplane.jobs.sweep_errors import field_error, raise_errors

if TYPE_CHECKING:
    from trainplane.jobs.spec import FinetuneSpec, TrainSpec

MAX_PARAMETERS = 32
MAX_VALUES = 1000
MAX_TRIALS = 1000
MAX_PARALLEL = 256
DEFAULT_TRIALS = 10
DEFAULT_REDUCTION_FACTOR = 3
# Trials are named f"{name}-{number}" and job names hold 128 characters.
MAX_SWEEP_NAME = 120
# Optuna's samplers seed numpy, which takes 32-bit seeds.
MAX_SEED = 2**32 - 1


class TrialPathError(SpecError):
    """A parameter's path cannot be set in the trial's document."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"parameters.{path}: {reason}")
        self.path = path
        self.reason = reason


Distribution = Literal["uniform", "log_uniform", "int_uniform"]


class SweepParameter(Strict):
    """One searched path: a list of ``values``, or a ``distribution`` between
    ``low`` and ``high``."""

    values: list[Any] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_VALUES,
        description="The values to try, in order for grid.",
        examples=[[0.001, 0.01]],
    )
    distribution: Distribution | None = Field(
        default=None, description="Draw values between low and high (random and tpe)."
    )
    low: float | None = Field(default=None, description="The distribution's lowest value.")
    high: float | None = Field(default=None, description="The distribution's highest value.")

    @field_validator("values")
    @classmethod
    def _storable_values(cls, values: list[Any] | None) -> list[Any] | None:
        if values is None:
            return None
        seen: set[str] = set()
        for index, value in enumerate(values):
            try:
                text = json.dumps(value, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError):
                raise PydanticCustomError(
                    "sweep_value",
                    "value {index} cannot be stored: values must be JSON with finite numbers",
                    {"index": index},
                ) from None
            if text in seen:
                raise PydanticCustomError("sweep_value", "{value} is listed twice", {"value": text})
            seen.add(text)
        return values

    @model_validator(mode="after")
    def _one_space(self) -> SweepParameter:
        if (self.values is None) == (self.distribution is None):
            raise PydanticCustomError(
                "sweep_parameter", "give either values or a distribution (with low and high)"
            )
        if self.values is not None:
            extra = [n for n in ("low", "high") if getattr(self, n) is not None]
            if extra:
                raise_errors(
                    "SweepParameter",
                    [field_error((n,), "only applies to a distribution") for n in extra],
                )
            return self
        missing = [n for n in ("low", "high") if getattr(self, n) is None]
        if missing:
            raise_errors(
                "SweepParameter",
                [field_error((n,), f"required with {self.distribution}") for n in missing],
            )
        assert self.low is not None and self.high is not None
        if self.distribution == "int_uniform":
            whole = [n for n in ("low", "high") if not float(getattr(self, n)).is_integer()]
            if whole:
                raise_errors(
                    "SweepParameter",
                    [field_error((n,), "int_uniform takes whole numbers") for n in whole],
                )
        if self.low >= self.high:
            raise_errors("SweepParameter", [field_error(("high",), "must be greater than low")])
        if self.distribution == "log_uniform" and self.low <= 0:
            raise_errors(
                "SweepParameter",
                [field_error(("low",), "log_uniform needs low > 0")],
            )
        return self

    @property
    def points(self) -> list[Any]:
        """The values a trial may get, or both ends of the distribution."""
        if self.values is not None:
            return list(self.values)
        assert self.low is not None and self.high is not None
        if self.distribution == "int_uniform":
            return [int(self.low), int(self.high)]
        return [self.low, self.high]


class Objective(Strict):
    """The metric the sweep optimizes: each trial's last reported value."""

    metric: MetricName = Field(description="A metric the trials report.", examples=["loss"])
    mode: Literal["min", "max"] = Field(default="min", description="Whether lower is better.")


class Search(Strict):
    """How trials' parameters are chosen and how many run."""

    algorithm: Literal["grid", "random", "tpe"] = Field(
        default="random",
        description="`grid`: every combination of values; `random`; `tpe`: Optuna's TPE.",
    )
    trials: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TRIALS,
        description=f"Default: the grid's size for grid, else {DEFAULT_TRIALS}.",
    )
    parallel: int = Field(default=1, ge=1, le=MAX_PARALLEL, description="Trials at once.")
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description="Seeds the sampler.")


class EarlyStop(Strict):
    """Stopping the worse trials early, at their decision steps (they end CANCELLED)."""

    algorithm: Literal["asha", "median", "none"] = Field(
        default="none", description="`asha`, `median`, or `none` (every trial runs to its end)."
    )
    min_steps: int | None = Field(
        default=None,
        ge=1,
        le=2**31 - 1,
        description="The first decision step; required with asha or median.",
        examples=[100],
    )
    reduction_factor: int | None = Field(
        default=None,
        ge=2,
        le=16,
        description=f"asha: keep 1 in this many trials at each rung. Default: "
        f"{DEFAULT_REDUCTION_FACTOR}.",
    )

    @model_validator(mode="after")
    def _fields_of_algorithm(self) -> EarlyStop:
        errors = []
        if self.algorithm == "none":
            errors = [
                field_error((n,), "only applies to early_stop asha or median")
                for n in ("min_steps", "reduction_factor")
                if getattr(self, n) is not None
            ]
        elif self.min_steps is None:
            errors.append(field_error(("min_steps",), f"required with {self.algorithm}"))
        if self.algorithm == "median" and self.reduction_factor is not None:
            errors.append(field_error(("reduction_factor",), "only applies to asha"))
        raise_errors("EarlyStop", errors)
        if self.algorithm == "asha" and self.reduction_factor is None:
            self.reduction_factor = DEFAULT_REDUCTION_FACTOR
        return self


class SweepSpec(Strict):
    kind: Literal["sweep"] = Field(description="Runs trials, each an ordinary job.")
    name: JobName = Field(description="The sweep's name; trials are named NAME-1, NAME-2, ...")
    project: ProjectName = Field(default="default", description="The project of every trial.")
    trial: JsonObject = Field(
        description="A train or finetune spec without name and project.",
        examples=[{"kind": "train", "entrypoint": {"function": "train:train_loop"}}],
    )
    parameters: dict[str, SweepParameter] = Field(
        min_length=1,
        max_length=MAX_PARAMETERS,
        description="Searched values by the trial's paths, as --set takes them.",
        examples=[
            {"entrypoint.args.lr": {"distribution": "log_uniform", "low": 1e-4, "high": 0.1}}
        ],
    )
    objective: Objective = Field(
        description="The metric to optimize.", examples=[{"metric": "loss", "mode": "min"}]
    )
    search: Search = Field(
        default_factory=Search, description="How trials are chosen and how many run at once."
    )
    early_stop: EarlyStop = Field(
        default_factory=EarlyStop, description="Whether and when worse trials are stopped."
    )
    register_model: RegisterModel | None = Field(
        default=None, description="Where the best trial's model is registered."
    )
    priority: Literal["low", "normal", "high"] = Field(
        default="normal", description="The trials' priority, unless the template sets one."
    )

    @model_validator(mode="after")
    def _trials_valid(self) -> SweepSpec:
        from trainplane.jobs.sweep_checks import check_sweep

        check_sweep(self)
        return self

    @property
    def trial_kind(self) -> Literal["train", "finetune"]:
        return self.trial["kind"]

    @property
    def trial_count(self) -> int:
        """How many trials the sweep runs at most (search.trials, resolved at parse)."""
        if self.search.trials is not None:
            return self.search.trials
        grid = self.grid
        return len(grid) if grid is not None else DEFAULT_TRIALS

    @property
    def planned_trials(self) -> int:
        """How many trials the sweep makes at most: ``search.trials``, or fewer
        when its grid has fewer combinations."""
        grid = self.grid
        return min(self.trial_count, len(grid)) if grid is not None else self.trial_count

    @property
    def grid_size(self) -> int:
        """The number of combinations of the parameters' values (distributions count 0)."""
        return math.prod(
            len(p.values) if p.values is not None else 0 for p in self.parameters.values()
        )

    @property
    def grid(self) -> list[dict[str, Any]] | None:
        """Every combination, for algorithm grid: paths in sorted order (a stored
        document keeps no key order), each parameter's values in its order,
        the last path varying fastest."""
        if self.search.algorithm != "grid":
            return None
        paths = sorted(self.parameters)
        spaces = [self.parameters[p].values or [] for p in paths]
        return [dict(zip(paths, combo, strict=True)) for combo in itertools.product(*spaces)]

    def trial_document(self, parameters: dict[str, Any], number: int) -> dict[str, Any]:
        """The trial's spec document, before validation. Raises SpecError for a
        path that cannot be set."""
        document = copy.deepcopy(self.trial)
        for path, value in parameters.items():
            try:
                set_path(document, split_path(path), copy.deepcopy(value))
            except PathError as exc:
                raise TrialPathError(path, str(exc)) from None
        document["name"] = f"{self.name}-{number}"
        document["project"] = self.project
        if self.register_model is not None:
            document["register_model"] = self.register_model.model_dump(mode="json")
        document.setdefault("priority", self.priority)
        return document

    def trial_spec(self, parameters: dict[str, Any], number: int) -> TrainSpec | FinetuneSpec:
        """The spec of trial ``number`` with ``parameters`` (path -> value).
        Raises pydantic's ValidationError, or SpecError for a path that
        cannot be set."""
        return trial_model(self.trial_kind).model_validate(self.trial_document(parameters, number))

    def trial_gpus(self) -> tuple[int, int]:
        """The fewest and the most GPUs a trial asks for."""
        swept = self.parameters.get("resources.gpus")
        if swept is None:
            resources = self.trial.get("resources")
            gpus = resources.get("gpus", 1) if isinstance(resources, dict) else 1
            return int(gpus), int(gpus)
        counts = [int(v) for v in swept.points]
        return min(counts), max(counts)

    def max_trial_gpus(self) -> int:
        """resources.gpus of the template, or the most of its values if swept."""
        return self.trial_gpus()[1]


def trial_model(kind: str) -> type[TrainSpec] | type[FinetuneSpec]:
    # Imported here: trainplane.jobs.spec builds its union from SweepSpec.
    from trainplane.jobs.spec import FinetuneSpec, TrainSpec

    return TrainSpec if kind == "train" else FinetuneSpec
