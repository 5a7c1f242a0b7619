"""What a spec runs: its own ``entrypoint.function`` or its kind's built-in
recipe, or the argv of its script or command (``entrypoint.args`` appended as
flags).

The recipe is named as a ``module:function`` string so that deciding what to run
imports no recipe code: the runtime loads the function by name on the workers.
"""

from __future__ import annotations

import json
from typing import Any

from trainplane.jobs.spec import Entrypoint, FinetuneSpec, TrainSpec

# Kinds other than ``train`` run a built-in recipe (an ordinary train function).
RECIPE_FUNCTIONS = {"finetune": "trainplane.recipes.finetune.recipe:train"}


def entrypoint_of(spec: TrainSpec | FinetuneSpec) -> Entrypoint | None:
    """The spec's own entrypoint; None for a kind that runs a recipe."""
    return spec.entrypoint if isinstance(spec, TrainSpec) else None


def wanted_secrets(spec: TrainSpec | FinetuneSpec) -> dict[str, str]:
    """The spec's ``entrypoint.secrets``: environment variable -> project secret key."""
    entrypoint = entrypoint_of(spec)
    return dict(entrypoint.secrets) if entrypoint is not None else {}


def function_of(spec: TrainSpec | FinetuneSpec) -> str | None:
    """The ``module:function`` a spec runs: its own, or its kind's recipe."""
    recipe = RECIPE_FUNCTIONS.get(spec.kind)
    if recipe:
        return recipe
    entrypoint = entrypoint_of(spec)
    return entrypoint.function if entrypoint is not None else None


def command_of(entrypoint: Entrypoint | None) -> list[str] | None:
    """The argv each rank runs: the script or command, then ``entrypoint.args``
    as flags. None for a function (or no entrypoint)."""
    if entrypoint is None:
        return None
    if entrypoint.command:
        argv = list(entrypoint.command)
    elif entrypoint.script:
        argv = ["python", entrypoint.script]
    else:
        return None
    return argv + flags_of(entrypoint.args)


def flags_of(args: dict[str, Any]) -> list[str]:
    """``--key value`` per arg, in the spec's order, as argparse and
    HfArgumentParser read them: strings and numbers as str(), booleans as
    ``true``/``false``, lists and objects as JSON; a null adds nothing."""
    flags: list[str] = []
    for key, value in args.items():
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, list | dict):
            text = json.dumps(value)
        else:
            text = str(value)
        flags += [f"--{key}", text]
    return flags
