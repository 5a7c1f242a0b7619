"""MLflow ``transformers`` models as trainplane publishes them, shared by the
fine-tune recipe (which saves the model it trained) and script jobs (which
leave a ``save_pretrained`` folder or a PEFT adapter behind).

A PEFT adapter is published in MLflow's PEFT layout: the base model in
``model/``, the adapter in ``peft/``, named by the flavor's ``peft_adaptor``,
so the registered version loads anywhere as the PEFT model without the base
model's original location.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

from trainplane.runtime.model_export import base_version

PEFT_FOLDER = "peft"  # MLflow's name for the adapter folder of a PEFT model


def requirements(lora: bool) -> list[str]:
    # Pinned explicitly: MLflow's own inference imports optional packages.
    packages = ["torch", "transformers", "tokenizers", "safetensors", *(["peft"] if lora else [])]
    return [f"{name}=={base_version(version(name))}" for name in packages]


def save_transformers(model: Any, tokenizer: Any, path: Path, *, task: str, lora: bool) -> None:
    """``model`` and ``tokenizer`` as an MLflow transformers model at ``path``.
    (MLflow's save from a checkpoint folder, which would not load the
    weights, does not work with transformers 5: a pipeline's task metadata
    changed shape.)"""
    import mlflow.transformers

    with _quiet_mlflow_transformers():
        mlflow.transformers.save_model(
            transformers_model={"model": model, "tokenizer": tokenizer},
            path=str(path),
            task=task,
            pip_requirements=requirements(lora),
        )


@contextlib.contextmanager
def _quiet_mlflow_transformers() -> Iterator[None]:
    """MLflow warns that a local model has no Hub model card or license."""
    logger = logging.getLogger("mlflow.transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def name_adapter(mlmodel: Path) -> None:
    """Point the transformers flavor at the adapter in ``peft/``."""
    import yaml

    document = yaml.safe_load(mlmodel.read_text())
    document["flavors"]["transformers"]["peft_adaptor"] = PEFT_FOLDER
    mlmodel.write_text(yaml.safe_dump(document, sort_keys=False))
