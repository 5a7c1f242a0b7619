"""``python -m trainplane.runtime.script_model``: a script job's model, exported
for registration.

With ``register_model``, once rank 0 of a script or command job exits 0 its
supervisor runs this with the rank's environment. What rank 0 left in
``TRAINPLANE_MODEL_DIR`` (runtime.model_folders) becomes the job's exported
model at ``TRAINPLANE_MODEL_URI`` (storage.exported_models: ``mlflow/`` and
the manifest written last), which the control plane registers as it does a
train function's:

- an MLflow model folder, as it is;
- a PEFT adapter, as an MLflow ``transformers`` model in MLflow's PEFT layout
  (runtime.transformers_layout), its base model from the local folder the
  adapter names, its tokenizer from the adapter's folder or the base's;
- a ``save_pretrained`` folder with a tokenizer and an architecture a text
  pipeline fits, as an MLflow ``transformers`` model with that task;
- any other ``save_pretrained`` folder (a model saved alone has no tokenizer,
  and MLflow's transformers flavor needs one to build its pipeline), as a
  ``python_function`` model from code (runtime.pretrained_pyfunc) holding the
  folder, which predicts from token ids.

The step and metrics of the manifest are rank 0's last report, which
``trainplane.script`` leaves in ``<TRAINPLANE_SYNC_DIR>/final-report.json``.
Exit 0 once the model is exported; else one line
``trainplane: training failed: <why>`` and exit 1.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import tempfile
from pathlib import Path

from trainplane.jobs.spec import load_spec
from trainplane.runtime import env as tp_env
from trainplane.runtime.model_export import ModelOrigin, SavedModel, publish_model
from trainplane.runtime.model_folders import (
    PICKLE_SUFFIXES,
    ModelFolder,
    ModelFolderError,
    Pretrained,
    link_or_copy,
    recognize,
    tokenizer_files,
)
from trainplane.runtime.transformers_layout import (
    PEFT_FOLDER,
    name_adapter,
    requirements,
    save_transformers,
)
from trainplane.storage.exported_models import MLFLOW_FOLDER

FINAL_REPORT = "final-report.json"  # in TRAINPLANE_SYNC_DIR, written by trainplane.script
PRETRAINED_ARTIFACT = "pretrained"  # pretrained_pyfunc.ARTIFACT


def export_script_model(
    model_dir: Path,
    model_uri: str,
    *,
    step: int,
    metrics: dict[str, float],
    origin: ModelOrigin,
) -> None:
    """Publish what ``model_dir`` holds as the exported model at ``model_uri``."""
    folder = recognize(model_dir)
    if folder.left_out:
        print(f"trainplane: not published with the model (pickles): {', '.join(folder.left_out)}")
    savers = {"mlflow": _as_it_is, "peft": _peft, "pretrained": _pretrained}
    save = savers[folder.kind]
    publish_model(
        model_uri,
        lambda staging: save(folder, staging / MLFLOW_FOLDER),
        step=step,
        metrics=metrics,
        origin=origin,
    )


def _as_it_is(folder: ModelFolder, target: Path) -> SavedModel:
    link_or_copy(folder.path, folder.files, target)
    suffixes = {Path(name).suffix for name in folder.files}
    if suffixes & PICKLE_SUFFIXES:
        serialization = "pickle"
    elif ".safetensors" in suffixes:
        serialization = "safetensors"
    else:
        serialization = "mlflow"
    assert folder.flavor is not None
    return SavedModel(folder.flavor, serialization)


def _pretrained(folder: ModelFolder, target: Path) -> SavedModel:
    model = folder.pretrained
    assert model is not None
    if model.task is not None and model.tokenizer_files:
        _save_transformers(model, model.path, target, lora=False)
        return SavedModel("transformers", "safetensors")
    with tempfile.TemporaryDirectory(prefix="trainplane-model-") as scratch:
        # The folder less its pickles, for MLflow to copy into the model.
        clean = link_or_copy(model.path, model.files, Path(scratch) / "pretrained")
        _save_from_code(clean, target)
    return SavedModel("python_function", "safetensors")


def _peft(folder: ModelFolder, target: Path) -> SavedModel:
    base = folder.pretrained
    assert base is not None
    # The adapter's own tokenizer first: a fine-tune may have added tokens.
    own_tokenizer = tokenizer_files(folder.files)
    if base.task is None:
        raise ModelFolderError(
            f"the adapter's base model is a {base.architecture}, which no text pipeline fits: "
            "save it as an MLflow model folder instead (mlflow.transformers.save_model)"
        )
    if not own_tokenizer and not base.tokenizer_files:
        raise ModelFolderError(
            "a PEFT adapter is registered as a transformers model, which needs a tokenizer: "
            "save it beside the adapter (tokenizer.save_pretrained(model_dir()))"
        )
    _save_transformers(base, folder.path if own_tokenizer else base.path, target, lora=True)
    adapter = [name for name in folder.files if name not in own_tokenizer]
    link_or_copy(folder.path, adapter, target / PEFT_FOLDER)
    name_adapter(target / "MLmodel")
    return SavedModel("transformers", f"peft-{folder.adapter_type}")


def _save_transformers(model: Pretrained, tokenizer: Path, target: Path, *, lora: bool) -> None:
    """The model in the architecture its config names (from safetensors, no
    remote code) and its tokenizer, loaded to be saved: MLflow builds its
    pipeline from them."""
    import transformers

    model_class = getattr(transformers, model.architecture, None)
    pretrained = transformers.PreTrainedModel
    if not (isinstance(model_class, type) and issubclass(model_class, pretrained)):
        raise ModelFolderError(
            f"{model.path}/config.json names {model.architecture!r}, which is no model class "
            "of transformers (models with remote code are not registered from a folder)"
        )
    assert model.task is not None
    loaded = model_class.from_pretrained(str(model.path), use_safetensors=True)
    loaded_tokenizer = transformers.AutoTokenizer.from_pretrained(str(tokenizer))
    save_transformers(loaded, loaded_tokenizer, target, task=model.task, lora=lora)


def _save_from_code(pretrained: Path, target: Path) -> None:
    import mlflow.pyfunc

    # The file, not imported here: importing it sets MLflow's model from code.
    code = importlib.util.find_spec("trainplane.runtime.pretrained_pyfunc")
    assert code is not None and code.origin is not None
    mlflow.pyfunc.save_model(
        str(target),
        python_model=code.origin,
        artifacts={PRETRAINED_ARTIFACT: str(pretrained)},
        pip_requirements=requirements(lora=False),
    )


def final_report(sync_dir: str | None) -> tuple[int, dict[str, float]]:
    """Rank 0's last report (step, metrics); (0, {}) when there is none."""
    if not sync_dir:
        return 0, {}
    try:
        document = json.loads((Path(sync_dir) / FINAL_REPORT).read_text())
    except (OSError, ValueError):
        return 0, {}
    if not isinstance(document, dict):
        return 0, {}
    step = document.get("step")
    raw = document.get("metrics")
    metrics = {
        str(name): float(value)
        for name, value in (raw.items() if isinstance(raw, dict) else ())
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    }
    return (step if isinstance(step, int) and step >= 0 else 0), metrics


def _one_line(exc: Exception) -> str:
    """The reason on one line (a YAML error spans several), at most 500 characters."""
    return " ".join(str(exc).split())[:500]


def main() -> int:
    try:
        model_dir = os.environ.get(tp_env.MODEL_DIR)
        model_uri = os.environ.get(tp_env.MODEL_URI)
        if not model_dir or not model_uri:
            raise ModelFolderError(
                f"the model cannot be exported: {tp_env.MODEL_DIR} and {tp_env.MODEL_URI} "
                "must both be set"
            )
        spec = load_spec(json.loads(os.environ[tp_env.SPEC]))
        origin = ModelOrigin(
            strategy=spec.strategy.type,
            world_size=int(os.environ.get("WORLD_SIZE", "1")),
            job_id=os.environ.get(tp_env.JOB_ID),
            attempt_id=os.environ.get(tp_env.ATTEMPT_ID),
        )
        step, metrics = final_report(os.environ.get(tp_env.SYNC_DIR))
        export_script_model(Path(model_dir), model_uri, step=step, metrics=metrics, origin=origin)
    except ModelFolderError as exc:
        print(f"{tp_env.TRAINING_FAILED}{_one_line(exc)}", flush=True)
        return 1
    except Exception as exc:  # whatever MLflow or the storage raised
        print(
            f"{tp_env.TRAINING_FAILED}the model in {tp_env.MODEL_DIR} was not exported: "
            f"{type(exc).__name__}: {_one_line(exc)}",
            flush=True,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
