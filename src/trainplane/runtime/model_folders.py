"""Recognizing what a script job's rank 0 left in ``TRAINPLANE_MODEL_DIR``:
an MLflow model folder, a PEFT adapter or a Hugging Face ``save_pretrained``
folder. Anything else is refused with one line saying what was found.

The folder is the job's data. Nothing here runs or unpickles any of it (JSON
and YAML are parsed, nothing else is read), and no symlink is followed out
of it: a symlink anywhere in the folder is refused, so what is published is
what rank 0 wrote. Weights are taken as safetensors only: a ``.bin`` or
``.pt`` file is a pickle, which runs code on whoever loads it (the
registered model's users), and ``save_pretrained`` writes safetensors unless
told otherwise. Other pickles beside the model (the ``training_args.bin`` of
``Trainer.save_model``) are left out of the published model.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

NOTHING_LEFT = (
    "register_model is set, but rank 0 left nothing in TRAINPLANE_MODEL_DIR "
    "(save the model there: trainplane.script.model_dir())"
)
MLMODEL = "MLmodel"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
CONFIG = "config.json"
PICKLE_SUFFIXES = frozenset({".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt"})
TOKENIZER_MARKERS = ("tokenizer.json", "tokenizer_config.json")
# The pipeline task MLflow's transformers flavor is saved with, by the suffix
# of the architecture's class name (transformers 5's text pipelines).
TASKS = (
    ("ForCausalLM", "text-generation"),
    ("LMHeadModel", "text-generation"),
    ("ForSequenceClassification", "text-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForMaskedLM", "fill-mask"),
)

Kind = Literal["mlflow", "peft", "pretrained"]


class ModelFolderError(ValueError):
    """The folder holds nothing that can be registered; the message says why."""


@dataclass(frozen=True)
class Pretrained:
    """A ``save_pretrained`` folder: its files to publish (pickles left
    out), its architecture, the text pipeline task that fits it (None: none
    does) and its tokenizer's files, if it has a tokenizer."""

    path: Path
    files: list[str]
    architecture: str
    task: str | None
    tokenizer_files: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ModelFolder:
    kind: Kind
    path: Path
    files: list[str]  # relative paths, to publish
    left_out: list[str] = field(default_factory=list)  # pickles not published
    flavor: str | None = None  # mlflow: the model's flavor
    pretrained: Pretrained | None = None  # pretrained: itself; peft: the base model
    adapter_type: str | None = None  # peft: lora, ...


def recognize(path: Path) -> ModelFolder:
    """What ``path`` holds, or ModelFolderError saying why it cannot be registered."""
    found = _plain_files(path, inside_model_dir=True)
    if not found:
        raise ModelFolderError(NOTHING_LEFT)
    if MLMODEL in found:
        return ModelFolder("mlflow", path, found, flavor=_flavor_of(path / MLMODEL))
    kept = [name for name in found if Path(name).suffix not in PICKLE_SUFFIXES]
    left_out = sorted(set(found) - set(kept))
    if ADAPTER_CONFIG in found:
        return _adapter(path, kept, left_out)
    if CONFIG in found:
        return ModelFolder("pretrained", path, kept, left_out, pretrained=_pretrained(path, found))
    listed = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
    raise ModelFolderError(
        "TRAINPLANE_MODEL_DIR holds no MLflow model (MLmodel), PEFT adapter "
        f"({ADAPTER_CONFIG}) nor save_pretrained folder ({CONFIG}); found {listed}"
    )


def _plain_files(path: Path, *, inside_model_dir: bool) -> list[str]:
    """Every regular file under ``path``, relative and sorted. In the model
    folder a symlink or any other special file is refused; elsewhere (a
    PEFT base the job named) symlinks are followed as the job would."""
    if not path.is_dir():
        return []
    found = []
    for root, folders, names in os.walk(path, followlinks=not inside_model_dir):
        for name in [*folders, *names]:
            entry = Path(root) / name
            relative = entry.relative_to(path).as_posix()
            mode = entry.lstat().st_mode
            if inside_model_dir and stat.S_ISLNK(mode):
                raise ModelFolderError(
                    f"TRAINPLANE_MODEL_DIR holds a symlink ({relative}): save the files themselves"
                )
            if name in names and entry.is_file():
                found.append(relative)
            elif name in names:
                where = "TRAINPLANE_MODEL_DIR" if inside_model_dir else str(path)
                raise ModelFolderError(f"{where} holds {relative}, not a plain file")
    return sorted(found)


def _flavor_of(mlmodel: Path) -> str:
    """The first flavor other than python_function (that one when alone)."""
    import yaml

    try:
        document = yaml.safe_load(mlmodel.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ModelFolderError(f"TRAINPLANE_MODEL_DIR/{MLMODEL} does not parse: {exc}") from None
    flavors = document.get("flavors") if isinstance(document, dict) else None
    if not isinstance(flavors, dict) or not flavors:
        raise ModelFolderError(f"TRAINPLANE_MODEL_DIR/{MLMODEL} names no flavors")
    names = [str(name) for name in flavors]
    return next((name for name in names if name != "python_function"), names[0])


def _json(path: Path, what: str) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelFolderError(f"{what} does not parse: {exc}") from None
    if not isinstance(document, dict):
        raise ModelFolderError(f"{what} is not a JSON object")
    return document


def _pretrained(path: Path, found: list[str]) -> Pretrained:
    where = "TRAINPLANE_MODEL_DIR" if found else str(path)
    found = found or _plain_files(path, inside_model_dir=False)
    architectures = _json(path / CONFIG, f"{where}/{CONFIG}").get("architectures")
    if not architectures or not isinstance(architectures[0], str):
        raise ModelFolderError(f"{where}/{CONFIG} names no architecture (its 'architectures')")
    top = [name for name in found if "/" not in name]
    if not any(name.endswith(".safetensors") for name in top):
        pickled = [name for name in top if Path(name).suffix in PICKLE_SUFFIXES]
        if pickled:
            raise ModelFolderError(
                f"the weights in {where} are pickles ({pickled[0]}), which run code when "
                "loaded: save them as safetensors (save_pretrained's default)"
            )
        raise ModelFolderError(f"{where} has a {CONFIG} but no weights (*.safetensors)")
    architecture = architectures[0]
    task = next((task for suffix, task in TASKS if architecture.endswith(suffix)), None)
    kept = [name for name in found if Path(name).suffix not in PICKLE_SUFFIXES]
    return Pretrained(path, kept, architecture, task, tokenizer_files(top))


def tokenizer_files(names: list[str]) -> list[str]:
    """The tokenizer's files among a folder's top-level ``names``; none
    unless ``tokenizer.json`` or ``tokenizer_config.json`` is one."""
    if not any(marker in names for marker in TOKENIZER_MARKERS):
        return []
    prefixes = (
        *("tokenizer", "vocab", "merges", "special_tokens", "added_tokens", "chat_template"),
        *("spiece", "sentencepiece"),
    )
    return [name for name in names if "/" not in name and name.startswith(prefixes)]


def _adapter(path: Path, kept: list[str], left_out: list[str]) -> ModelFolder:
    config = _json(path / ADAPTER_CONFIG, f"TRAINPLANE_MODEL_DIR/{ADAPTER_CONFIG}")
    if ADAPTER_WEIGHTS not in kept:
        raise ModelFolderError(
            f"TRAINPLANE_MODEL_DIR has an {ADAPTER_CONFIG} but no {ADAPTER_WEIGHTS} "
            "(adapter weights are taken as safetensors only, pickles run code when loaded)"
        )
    base_name = config.get("base_model_name_or_path")
    base = Path(base_name).expanduser() if isinstance(base_name, str) and base_name else None
    if base is None or not (base / CONFIG).is_file():
        raise ModelFolderError(
            f"the adapter's base model ({ADAPTER_CONFIG}: base_model_name_or_path = "
            f"{base_name!r}) must be a local save_pretrained folder, for the registered "
            "model to hold it"
        )
    peft_type = str(config.get("peft_type") or "lora").lower()
    return ModelFolder(
        "peft",
        path,
        kept,
        left_out,
        pretrained=_pretrained(base.resolve(), []),
        adapter_type=peft_type,
    )


def link_or_copy(source: Path, names: list[str], target: Path) -> Path:
    """``names`` (relative to ``source``) into ``target``: hard links where the
    filesystem allows (a big model is not copied twice), else copies."""
    for name in names:
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link((source / name).resolve(), destination)
        except OSError:
            shutil.copyfile(source / name, destination)
    return target
