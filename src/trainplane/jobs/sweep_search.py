"""A sweep's search and early stopping: which parameters the next trial gets,
and whether a trial at a decision step goes on or is pruned.

Optuna does the work (its samplers propose, its pruners judge, through its
ask/tell interface), but it keeps no state here: every call rebuilds an
in-memory study from the sweep's trial records, which the database holds, so a
restarted server searches and prunes exactly as the one that stopped would
have. What a pruner remembers about a trial (ASHA's rung values) is handed back
in ``Verdict.search_state`` to be stored with the trial and given back on the
next rebuild.

Pure code: no database, no HTTP. Optuna is imported inside the functions so
that importing this module (the API, the CLI) stays cheap.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import statistics
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from types import ModuleType

    import optuna

    from .sweep_spec import SweepParameter, SweepSpec

TrialState = Literal["running", "succeeded", "pruned", "failed"]
TRIAL_STATES: tuple[TrialState, ...] = ("running", "succeeded", "pruned", "failed")
MAX_DECISION_STEPS = 64
MAX_STEP = 2**31 - 1  # steps are stored in 32-bit integer columns
DEFAULT_REDUCTION_FACTOR = 3
DEFAULT_TRIALS = 10
# The median rule compares against finished trials: a median of fewer than two
# is one trial's luck.
MEDIAN_MIN_TRIALS = 2
ASHA_RUNG_KEY = "completed_rung_{}"  # what Optuna's SuccessiveHalvingPruner writes


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the database knows it."""

    number: int  # 1-based
    parameters: dict[str, Any]
    state: TrialState  # running: not ended (queued..running)
    value: float | None = None  # final objective (last reported) when succeeded
    intermediate: dict[int, float] = field(default_factory=dict)  # objective at decision steps
    search_state: dict[str, Any] = field(default_factory=dict)  # the engine's, opaque


@dataclass(frozen=True)
class Verdict:
    """The pruner's answer for a trial at a decision step."""

    prune: bool
    reason: str  # when prune: "pruned at ...", naming the rung/step and the values compared
    search_state: dict[str, Any]  # the trial's search_state to store


def counts(trials: Iterable[TrialRecord]) -> dict[str, int]:
    """How many trials are in each state (every state present, 0 when none)."""
    result = dict.fromkeys(TRIAL_STATES, 0)
    for trial in trials:
        result[trial.state] += 1
    return result


def best(spec: SweepSpec, trials: Sequence[TrialRecord]) -> TrialRecord | None:
    """The succeeded trial with the best final objective (the lower number on
    a tie); None when no trial succeeded with a value."""
    sign = -1.0 if spec.objective.mode == "max" else 1.0
    finished = [t for t in trials if t.state == "succeeded" and _is_number(t.value)]
    if not finished:
        return None
    return min(finished, key=lambda t: (sign * float(t.value or 0.0), t.number))


def decision_steps(spec: SweepSpec) -> list[int]:
    """The steps at which trials are judged: ASHA's rungs (min_steps times the
    reduction factor's powers), the median rule's every min_steps; none
    without early stopping."""
    early_stop = spec.early_stop
    if early_stop.algorithm == "none" or not early_stop.min_steps:
        return []
    steps: list[int] = []
    if early_stop.algorithm == "asha":
        factor = early_stop.reduction_factor or DEFAULT_REDUCTION_FACTOR
        step = early_stop.min_steps
        while step <= MAX_STEP and len(steps) < MAX_DECISION_STEPS:
            steps.append(step)
            step *= factor
        return steps
    return [
        early_stop.min_steps * k
        for k in range(1, MAX_DECISION_STEPS + 1)
        if early_stop.min_steps * k <= MAX_STEP
    ]


def propose(spec: SweepSpec, trials: Sequence[TrialRecord], number: int) -> dict[str, Any] | None:
    """The parameters of trial ``number``; None when the grid is exhausted.

    The same spec (seed) and the same records give the same answer; each
    number gets its own draw (the sampler is seeded from the sweep's seed and
    the number, since the study, rebuilt every call, cannot carry a random
    state from one call to the next)."""
    for trial in trials:
        if trial.number == number:  # asked again: the answer already given
            return copy.deepcopy(trial.parameters)
    if spec.search.algorithm == "grid":
        grid = spec.grid or []
        return copy.deepcopy(grid[number - 1]) if 1 <= number <= len(grid) else None
    optuna = _optuna()
    seed = trial_seed(spec.search.seed, number)
    with _quiet(optuna):
        if spec.search.algorithm == "tpe":
            sampler: optuna.samplers.BaseSampler = optuna.samplers.TPESampler(
                seed=seed,
                n_startup_trials=tpe_startup_trials(spec),
                # Trials still running count as if they had a poor result, so
                # that parallel trials do not all crowd the same promising spot.
                constant_liar=spec.search.parallel > 1,
            )
        else:
            sampler = optuna.samplers.RandomSampler(seed=seed)
        study = _study(spec, trials, sampler=sampler, pruner=None)
        asked = study.ask(fixed_distributions=_distributions(spec))
    return {
        path: _from_internal(spec.parameters[path], asked.params[path])
        for path in sorted(spec.parameters)
    }


def judge(
    spec: SweepSpec, trials: Sequence[TrialRecord], number: int, step: int, value: float
) -> Verdict:
    """Whether trial ``number``, whose objective at decision step ``step`` is
    ``value``, goes on. ``trials`` includes the trial itself (its
    ``intermediate`` may not hold ``step`` yet)."""
    own = next((t for t in trials if t.number == number), None)
    state = dict(own.search_state) if own else {}
    algorithm = spec.early_stop.algorithm
    if algorithm == "none":
        return Verdict(prune=False, reason="", search_state=state)
    metric = spec.objective.metric
    if math.isnan(value):
        return Verdict(True, f"pruned at step {step}: {metric} is NaN", state)
    optuna = _optuna()
    judged = TrialRecord(
        number=number,
        parameters=own.parameters if own else {},
        state="running",
        intermediate={s: v for s, v in (own.intermediate if own else {}).items() if int(s) != step},
        search_state=state,
    )
    others = [t for t in trials if t.number != number]
    study = _study(spec, [*others, judged], sampler=None, pruner=_pruner(optuna, spec))
    frozen = next(t for t in study.get_trials(deepcopy=False) if t.user_attrs["number"] == number)
    # Optuna's own path: the trial reports, then asks its study's pruner (which
    # writes what it keeps, ASHA's rung values, into the trial's system attrs).
    # A FrozenTrial names its storage id only privately; Trial needs that id.
    trial = optuna.trial.Trial(study, frozen._trial_id)
    with _quiet(optuna):
        trial.report(float(value), step)
        prune = trial.should_prune()
    after = study.get_trials(deepcopy=False)
    new_state = dict(next(t for t in after if t.user_attrs["number"] == number).system_attrs)
    if not prune:
        return Verdict(prune=False, reason="", search_state=new_state)
    if algorithm == "asha":
        reason = _asha_reason(spec, after, state, new_state, step, value)
    else:
        reason = _median_reason(spec, after, number, step)
    return Verdict(prune=True, reason=reason, search_state=new_state)


def trial_seed(seed: int, number: int) -> int:
    """A sampler seed of its own for each trial number, the same on every
    machine and in every process (unlike ``hash``)."""
    digest = hashlib.sha256(f"{seed}:{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def tpe_startup_trials(spec: SweepSpec) -> int:
    """Random trials before TPE models the results: Optuna's 10 for large
    sweeps, a third of a small one (at least 2) so that TPE gets to work."""
    trials = spec.search.trials or DEFAULT_TRIALS
    return max(2, min(10, trials // 3))


def _asha_reason(
    spec: SweepSpec,
    trials: Sequence[optuna.trial.FrozenTrial],
    before: dict[str, Any],
    after: dict[str, Any],
    step: int,
    value: float,
) -> str:
    """Why ASHA pruned: at the rung it just recorded, the trial's value was
    not among the best 1/reduction_factor of the values recorded there."""
    written = [key for key in after if key not in before and key.startswith("completed_rung_")]
    rung = max((int(key.rsplit("_", 1)[1]) for key in written), default=0)
    key = ASHA_RUNG_KEY.format(rung)
    factor = spec.early_stop.reduction_factor or DEFAULT_REDUCTION_FACTOR
    competing = sorted(float(t.system_attrs[key]) for t in trials if key in t.system_attrs) or [
        value
    ]
    if spec.objective.mode == "max":
        competing.reverse()
    kept = max(len(competing) // factor, 1)
    cutoff = competing[kept - 1]
    return (
        f"pruned at rung {rung} (step {step}): {spec.objective.metric} {value:.4g} is not in "
        f"the best 1/{factor} of {len(competing)} trials there (cutoff {cutoff:.4g})"
    )


def _median_reason(
    spec: SweepSpec, trials: Sequence[optuna.trial.FrozenTrial], number: int, step: int
) -> str:
    """Why the median rule pruned: the trial's best value so far is worse
    than the median of the finished trials' values at this step."""
    own = next(t for t in trials if t.user_attrs["number"] == number)
    mine = [v for v in own.intermediate_values.values() if not math.isnan(v)]
    so_far = max(mine) if spec.objective.mode == "max" else min(mine)
    theirs = [
        t.intermediate_values[step]
        for t in trials
        if t.state.name == "COMPLETE"
        and step in t.intermediate_values
        and not math.isnan(t.intermediate_values[step])
    ]
    median = statistics.median(theirs)
    return (
        f"pruned at step {step}: {spec.objective.metric} {so_far:.4g} (its best so far) is "
        f"worse than the median {median:.4g} of {len(theirs)} finished trials there"
    )


def _pruner(optuna: ModuleType, spec: SweepSpec) -> optuna.pruners.BasePruner:
    early_stop = spec.early_stop
    if early_stop.algorithm == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=early_stop.min_steps,
            reduction_factor=early_stop.reduction_factor or DEFAULT_REDUCTION_FACTOR,
            min_early_stopping_rate=0,
        )
    return optuna.pruners.MedianPruner(
        n_startup_trials=MEDIAN_MIN_TRIALS,
        n_warmup_steps=early_stop.min_steps,
        interval_steps=early_stop.min_steps,
        n_min_trials=MEDIAN_MIN_TRIALS,
    )


def _study(
    spec: SweepSpec,
    trials: Sequence[TrialRecord],
    *,
    sampler: optuna.samplers.BaseSampler | None,
    pruner: optuna.pruners.BasePruner | None,
) -> optuna.study.Study:
    """An in-memory study holding ``trials``, in number order, each with its
    parameters, state, values and search state."""
    optuna = _optuna()
    direction = "maximize" if spec.objective.mode == "max" else "minimize"
    study = optuna.create_study(
        direction=direction,
        # Judging samples nothing: the cheapest sampler, seeded for form's sake.
        sampler=sampler or optuna.samplers.RandomSampler(seed=0),
        pruner=pruner or optuna.pruners.NopPruner(),
    )
    spaces = _distributions(spec)
    for record in sorted(trials, key=lambda t: t.number):
        study.add_trial(_frozen(optuna, spec, spaces, record))
    return study


def _frozen(
    optuna: ModuleType, spec: SweepSpec, spaces: dict[str, Any], record: TrialRecord
) -> optuna.trial.FrozenTrial:
    states = optuna.trial.TrialState
    params: dict[str, Any] = {}
    for path, value in record.parameters.items():
        if path not in spaces:
            continue  # not a parameter of this spec: nothing to learn from it
        internal = _to_internal(spec.parameters[path], value)
        if internal is not None and _inside(spec.parameters[path], internal):
            params[path] = internal
    intermediate = {int(step): float(v) for step, v in record.intermediate.items()}
    value: float | None = None
    if record.state == "succeeded" and _is_number(record.value):
        state, value = states.COMPLETE, float(record.value or 0.0)
    elif record.state == "pruned":
        state = states.PRUNED
    elif record.state == "running":
        state = states.RUNNING
    else:  # failed, or succeeded without an objective: nothing to rank it by
        state = states.FAIL
    return optuna.trial.create_trial(
        state=state,
        value=value,
        params=params,
        distributions={path: spaces[path] for path in params},
        user_attrs={"number": record.number},
        system_attrs=dict(record.search_state),
        intermediate_values=intermediate,
    )


def _distributions(spec: SweepSpec) -> dict[str, Any]:
    """Optuna's distribution for each parameter, in path order (a sampler
    draws in this order, and a stored spec keeps no key order): listed values
    are a categorical over their positions (the values may be any JSON)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    spaces: dict[str, Any] = {}
    for path in sorted(spec.parameters):
        parameter = spec.parameters[path]
        if parameter.values is not None:
            spaces[path] = CategoricalDistribution(list(range(len(parameter.values))))
        elif parameter.distribution == "int_uniform":
            spaces[path] = IntDistribution(int(parameter.low), int(parameter.high))
        else:
            log = parameter.distribution == "log_uniform"
            spaces[path] = FloatDistribution(float(parameter.low), float(parameter.high), log=log)
    return spaces


def _to_internal(parameter: SweepParameter, value: Any) -> Any:
    """A stored parameter value as the study's distribution holds it; None
    when it is not one of the parameter's values."""
    if parameter.values is None:
        return int(value) if parameter.distribution == "int_uniform" else float(value)
    wanted = _canonical(value)
    for index, candidate in enumerate(parameter.values):
        if _canonical(candidate) == wanted:
            return index
    return None


def _inside(parameter: SweepParameter, internal: Any) -> bool:
    """Whether a stored value lies in the parameter's space as the spec now
    states it (Optuna refuses a trial holding one that does not)."""
    if parameter.values is not None:
        return True  # found among the values by _to_internal
    return float(parameter.low or 0) <= internal <= float(parameter.high or 0)


def _from_internal(parameter: SweepParameter, internal: Any) -> Any:
    if parameter.values is not None:
        return copy.deepcopy(parameter.values[int(internal)])
    if parameter.distribution == "int_uniform":
        return int(internal)
    return float(internal)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _is_number(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def _optuna() -> ModuleType:
    import optuna

    # Every call builds a study: without this Optuna logs "A new study created
    # in memory" at INFO each time, flooding the server's log.
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


class _quiet(warnings.catch_warnings):
    """Optuna's experimental-feature warnings (constant_liar) are expected here."""

    def __init__(self, optuna: ModuleType) -> None:
        super().__init__()
        self._category = optuna.exceptions.ExperimentalWarning

    def __enter__(self) -> None:
        super().__enter__()
        warnings.simplefilter("ignore", self._category)
