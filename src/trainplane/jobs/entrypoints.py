"""Which train function a spec runs: its own ``entrypoint.function``, or its
kind's built-in recipe.

The recipe is named as a ``module:function`` string so that deciding what to run
imports no recipe code: the runtime loads the function by name on the workers.
"""

from __future__ import annotations

# Kinds other than ``train`` run a built-in recipe (an ordinary train function).
RECIPE_FUNCTIONS = {"finetune": "trainplane.recipes.finetune.recipe:train"}


def function_of(spec: dict) -> str | None:
    """The ``module:function`` a spec runs: its own, or its kind's recipe."""
    recipe = RECIPE_FUNCTIONS.get(spec.get("kind") or "train")
    if recipe:
        return recipe
    return (spec.get("entrypoint") or {}).get("function")
