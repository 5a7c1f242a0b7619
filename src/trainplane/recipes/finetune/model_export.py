"""The trained model as an MLflow ``transformers`` model.

A full fine-tune is saved whole. A LoRA fine-tune is saved as its adapter on
top of the unchanged base model, in MLflow's PEFT layout (the base in
``model/``, the adapter in ``peft/``, named by the flavor's ``peft_adaptor``),
so the registered version loads anywhere as the PEFT model without the base
model's original location. With ``method.merge`` the merged model is saved
too, as an extra MLflow model (``merged/``) logged to the same run.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch

from trainplane.runtime.model_export import SavedModel, base_version
from trainplane.storage.exported_models import MLFLOW_FOLDER

MERGED_FOLDER = "merged"
MERGED_ARTIFACT = "merged-model"
PEFT_FOLDER = "peft"  # MLflow's name for the adapter folder of a PEFT model


def requirements(lora: bool) -> list[str]:
    # Pinned explicitly: MLflow's own inference imports optional packages.
    packages = ["transformers", "tokenizers", "safetensors", *(["peft"] if lora else [])]
    return [
        f"torch=={base_version(torch.__version__)}",
        *(f"{name}=={version(name)}" for name in packages),
    ]


class TransformersSaver:
    def __init__(self, tokenizer: Any, *, lora: bool, merge: bool) -> None:
        self.tokenizer = tokenizer
        self.lora = lora
        self.merge = merge

    def __call__(self, model: torch.nn.Module, folder: Path) -> SavedModel:
        if not self.lora:
            self._save(model, folder / MLFLOW_FOLDER)
            return SavedModel("transformers", "safetensors")
        from peft import PeftModel

        adapter = Path(tempfile.mkdtemp(prefix="trainplane-adapter-"))
        try:
            model.save_pretrained(str(adapter))  # the adapter alone
            base = model.unload()  # the base model without the LoRA layers
            self._save(base, folder / MLFLOW_FOLDER)
            shutil.copytree(adapter, folder / MLFLOW_FOLDER / PEFT_FOLDER)
            _name_adapter(folder / MLFLOW_FOLDER / "MLmodel")
            extras = {}
            if self.merge:
                merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
                self._save(merged, folder / MERGED_FOLDER)
                extras[MERGED_ARTIFACT] = MERGED_FOLDER
        finally:
            shutil.rmtree(adapter, ignore_errors=True)
        return SavedModel("transformers", "peft-lora", extras)

    def _save(self, model: torch.nn.Module, path: Path) -> None:
        import mlflow.transformers

        model.config.use_cache = True  # for generation, once trained
        # MLflow warns that a local model has no Hub model card or license.
        quiet = logging.getLogger("mlflow.transformers")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            mlflow.transformers.save_model(
                transformers_model={"model": model, "tokenizer": self.tokenizer},
                path=str(path),
                task="text-generation",
                pip_requirements=requirements(self.lora),
            )
        finally:
            quiet.setLevel(level)


def _name_adapter(mlmodel: Path) -> None:
    import yaml

    document = yaml.safe_load(mlmodel.read_text())
    document["flavors"]["transformers"]["peft_adaptor"] = PEFT_FOLDER
    mlmodel.write_text(yaml.safe_dump(document, sort_keys=False))
