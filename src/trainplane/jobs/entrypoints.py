"""Which train function a spec runs: its own ``entrypoint.function``, or its
kind's built-in recipe.

The recipe is named as a ``module:function`` string so that deciding what to run
imports no recipe code: the runtime loads the function by name on the workers.
"""

from __future__ import annotations

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
