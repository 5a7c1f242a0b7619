"""Reading a spec file: YAML or JSON, ``--set`` overrides, and relative paths
resolved against the file's folder (DESIGN.md), so the server gets a spec that
means the same wherever the command ran. The SDK's (``Client.submit`` takes a
file's path); ``trainplane submit`` and ``trainplane plan`` read theirs here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from trainplane.jobs.spec_paths import PathError, set_path, split_path
from trainplane.jobs.yaml_lines import describe_yaml_error


class SpecFileError(Exception):
    pass


# What a file that is not a spec at all is told a spec is.
_A_SPEC = (
    "a spec needs at least `kind`, `name` and the code to run, like "
    "`kind: train`, `name: my-job` and `entrypoint: {script: train.py}`, one a line"
)


def load_spec_file(path: Path, overrides: list[str]) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecFileError(f"cannot read {path}: {exc.strerror}") from None
    try:
        document = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise SpecFileError(
            f"{path}, line {exc.lineno}, column {exc.colno}: not valid JSON: {exc.msg}"
        ) from None
    except yaml.YAMLError as exc:
        raise SpecFileError(describe_yaml_error(exc, str(path))) from None
    if document is None:
        raise SpecFileError(f"{path} is empty: {_A_SPEC}")
    if not isinstance(document, dict):
        what = "a list" if isinstance(document, list) else f"`{document}`"
        raise SpecFileError(f"{path} must hold a mapping of spec fields, not {what}: {_A_SPEC}")
    for override in overrides:
        apply_override(document, override)
    resolve_paths(document, path.resolve().parent)
    return document


def apply_override(document: dict[str, Any], override: str) -> None:
    """``resources.gpus=4`` sets a nested field; the value is read as YAML, so
    ``method.target_modules=[q_proj,v_proj]`` sets a list. A number after a
    list's name indexes it: ``entrypoint.command.1=train.py`` (one past the end
    appends)."""
    key, sep, raw = override.partition("=")
    if not sep or not key.strip():
        raise SpecFileError(f"--set {override!r}: expected key=value, for example resources.gpus=4")
    try:
        parts = split_path(key)
        value = yaml.safe_load(raw) if raw.strip() else ""
        set_path(document, parts, value)
    except PathError as exc:
        raise SpecFileError(f"--set {override!r}: {exc}") from None
    except yaml.YAMLError as exc:
        raise SpecFileError(f"--set {override!r}: cannot read the value: {exc}") from None


def _resolve(value: Any, base: Path) -> Any:
    if not isinstance(value, str) or not value or "://" in value or value in ("auto", "never"):
        return value
    return str((base / Path(value).expanduser()).resolve())


def resolve_paths(
    document: dict[str, Any], base: Path, *, default_working_dir: bool = True
) -> None:
    """Make the spec's local paths absolute against ``base``. A spec file's
    ``working_dir`` defaults to its folder (``default_working_dir``); a spec
    built in code names one only if it says so. A sweep's paths are its
    trial template's."""
    trial = document.get("trial")
    if document.get("kind") == "sweep" and isinstance(trial, dict):
        resolve_paths(trial, base, default_working_dir=default_working_dir)
        return
    entrypoint = document.get("entrypoint")
    # A job with entrypoint.code runs in its uploaded bundle: no folder of this machine.
    names_folder = isinstance(entrypoint, dict) and (
        "working_dir" in entrypoint or default_working_dir
    )
    if names_folder and not entrypoint.get("code"):
        entrypoint["working_dir"] = _resolve(entrypoint.get("working_dir", "."), base)
    if "base_model" in document:
        document["base_model"] = _resolve(document["base_model"], base)
    dataset = document.get("dataset")
    if isinstance(dataset, dict):
        for split in ("train", "eval"):
            if split in dataset:
                dataset[split] = _resolve(dataset[split], base)
    checkpoint = document.get("checkpoint")
    if isinstance(checkpoint, dict):
        for key in ("storage", "resume"):
            if key in checkpoint:
                checkpoint[key] = _resolve(checkpoint[key], base)
