"""``train.sweep(...)`` of a ``@trainplane.distributed`` function: a sweep
(``kind: sweep``, DESIGN.md "Sweeps") whose trial is a call of the function.

::

    search = train.sweep(
        steps=100,                                      # the call's own arguments
        parameters={"lr": {"distribution": "log_uniform", "low": 1e-4, "high": 1e-1},
                    "batch_size": [16, 32]},            # a list: its values
        objective="loss",                               # or {"metric": ..., "mode": "max"}
        search={"trials": 8, "parallel": 2},
        early_stop={"algorithm": "asha", "min_steps": 10},
    )
    search.result().best_trial.parameters

The call is shipped once; each trial runs it with the swept arguments given by
name (``lr`` is the spec path ``entrypoint.args.lr``, which the shipped call
passes to the function as a keyword). A dotted name is a path of the trial's
spec as it is (``strategy.type``, ``resources.gpus``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from trainplane.sdk.distributed import RemoteCall
from trainplane.sdk.errors import JobFailed
from trainplane.sdk.models import Job, Trials

ARGS_PATH = "entrypoint.args"
# The shipped call's own entrypoint args: a swept argument cannot take these names.
RESERVED_ARGS = ("payload", "function")
# What a sweep's trial leaves to the sweep (DESIGN.md "Sweeps").
SET_BY_SWEEP = ("name", "project", "register_model")
MAX_SWEEP_NAME = 120


class SweepOptionsError(ValueError):
    """The sweep's options cannot apply to the function; the message says which."""


def parameter_path(function: Callable[..., Any], name: str) -> str:
    """The spec path of a swept name: an argument of the function, or a path."""
    if "." in name:
        return name
    if name in RESERVED_ARGS:
        raise SweepOptionsError(
            f"parameter {name!r}: the shipped call uses entrypoint.args.{name} itself; "
            "rename the function's argument to sweep it"
        )
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return f"{ARGS_PATH}.{name}"  # nothing to check it against
    parameters = list(signature.parameters.values())[1:]  # after the TrainContext
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    named = {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    if name not in named and not takes_any:
        shown = ", ".join(sorted(named)) or "none"
        raise SweepOptionsError(
            f"parameter {name!r} is not an argument of "
            f"{getattr(function, '__qualname__', 'the function')} (its arguments: {shown}); "
            "a dotted name is a path of the trial's spec (strategy.type)"
        )
    return f"{ARGS_PATH}.{name}"


def parameter_space(name: str, space: Any) -> dict[str, Any]:
    """A list or tuple is its values; a mapping is the spec's parameter as it is."""
    if isinstance(space, list | tuple):
        return {"values": list(space)}
    if isinstance(space, Mapping):
        return dict(space)
    raise SweepOptionsError(
        f"parameter {name!r}: give a list of values or a mapping such as "
        "{'distribution': 'log_uniform', 'low': 1e-4, 'high': 1e-1}, not "
        f"{type(space).__name__}"
    )


def sweep_spec(
    function: Callable[..., Any],
    trial: dict[str, Any],
    *,
    passed: Mapping[str, Any],
    parameters: Mapping[str, Any],
    objective: str | Mapping[str, Any],
    search: Mapping[str, Any] | None = None,
    early_stop: Mapping[str, Any] | None = None,
    register_model: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """The sweep document around ``trial`` (the job spec a call makes).
    ``passed``: the call's keyword arguments, which a swept name may not repeat."""
    if not parameters:
        raise SweepOptionsError("parameters: name at least one argument (or spec path) to search")
    swept: dict[str, Any] = {}
    for key, space in parameters.items():
        if key in passed:
            raise SweepOptionsError(
                f"parameter {key!r} is both passed to the call and swept: pass it or sweep it"
            )
        swept[parameter_path(function, key)] = parameter_space(key, space)
    template = {k: v for k, v in trial.items() if k not in SET_BY_SWEEP}
    document: dict[str, Any] = {
        "kind": "sweep",
        "name": (name or trial["name"])[:MAX_SWEEP_NAME],
        "project": trial["project"],
        "trial": template,
        "parameters": swept,
        "objective": {"metric": objective} if isinstance(objective, str) else dict(objective),
    }
    if search is not None:
        document["search"] = dict(search)
    if early_stop is not None:
        document["early_stop"] = dict(early_stop)
    # The decorator's register_model applies to the best trial.
    chosen = register_model if register_model is not None else trial.get("register_model")
    if chosen is not None:
        document["register_model"] = dict(chosen)
    return document


class RemoteSweep(RemoteCall[Job]):
    """A submitted sweep: its job, its trials, and once it ends its best trial.
    Interrupting ``wait`` cancels the sweep, and so its trials."""

    def __repr__(self) -> str:
        return f"<RemoteSweep {self.name} job={self.job.id} {self.job.status}>"

    def trials(self) -> Trials:
        """Every trial so far: parameters, status, objective values."""
        return self.client.trials(self.job.id)

    def result(self, timeout: float | None = None) -> Job:
        """The sweep once it SUCCEEDED (``best_trial`` names the best trial);
        JobFailed when it failed or was cancelled."""
        job = self.wait(timeout) if not self.job.is_terminal else self.job
        if not job.succeeded or job.best_trial is None:
            raise JobFailed(job)
        return job

    def best_result(self, timeout: float | None = None) -> Any:
        """What the best trial's function returned (rank 0)."""
        best = self.result(timeout).best_trial
        assert best is not None  # result() checked it
        trial = RemoteCall(self.client, self.client.job(best.id), best.name, progress=False)
        return trial.result()
