"""The trained model as an MLflow ``transformers`` model.

A full fine-tune is saved whole. A LoRA fine-tune is saved as its adapter on
top of the unchanged base model, in MLflow's PEFT layout
(``trainplane.runtime.transformers_layout``). With ``method.merge`` the
merged model is saved too, as an extra MLflow model (``merged/``) logged to
the same run.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from trainplane.runtime.model_export import SavedModel
from trainplane.runtime.transformers_layout import (
    PEFT_FOLDER,
    name_adapter,
    save_transformers,
)
from trainplane.storage.exported_models import MLFLOW_FOLDER

MERGED_FOLDER = "merged"
MERGED_ARTIFACT = "merged-model"


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
            name_adapter(folder / MLFLOW_FOLDER / "MLmodel")
            extras = {}
            if self.merge:
                merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
                self._save(merged, folder / MERGED_FOLDER)
                extras[MERGED_ARTIFACT] = MERGED_FOLDER
        finally:
            shutil.rmtree(adapter, ignore_errors=True)
        return SavedModel("transformers", "peft-lora", extras)

    def _save(self, model: torch.nn.Module, path: Path) -> None:
        model.config.use_cache = True  # for generation, once trained
        save_transformers(model, self.tokenizer, path, task="text-generation", lora=self.lora)
