"""Built-in train functions: what a spec of a kind other than ``train`` runs.

A recipe is an ordinary train function (it takes a TrainContext), so it gets
the strategies, checkpoints, resume, progress and model export of every job.
"""

from __future__ import annotations

FINETUNE_FUNCTION = "trainplane.recipes.finetune.recipe:train"


def function_of(spec: dict) -> str | None:
    """The ``module:function`` a spec runs: its own, or its kind's recipe."""
    if spec.get("kind") == "finetune":
        return FINETUNE_FUNCTION
    return (spec.get("entrypoint") or {}).get("function")
