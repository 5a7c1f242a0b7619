"""Reading a spec file: YAML or JSON, ``--set`` overrides, and relative paths
resolved against the file's folder (DESIGN.md), so the server gets a spec that
means the same wherever the command ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


class SpecFileError(Exception):
    pass


def load_spec_file(path: Path, overrides: list[str]) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecFileError(f"cannot read {path}: {exc.strerror}") from None
    try:
        document = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise SpecFileError(
            f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}"
        ) from None
    if not isinstance(document, dict):
        raise SpecFileError(
            f"{path} must hold a mapping of spec fields, not {type(document).__name__}"
        )
    for override in overrides:
        apply_override(document, override)
    resolve_paths(document, path.resolve().parent)
    return document


def apply_override(document: dict[str, Any], override: str) -> None:
    """``resources.gpus=4`` sets a nested field; the value is read as YAML."""
    key, sep, raw = override.partition("=")
    if not sep or not key.strip():
        raise SpecFileError(f"--set {override!r}: expected key=value, for example resources.gpus=4")
    parts = key.strip().split(".")
    node = document
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise SpecFileError(f"--set {override!r}: {part} is not a mapping")
        node = child
    try:
        node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise SpecFileError(f"--set {override!r}: cannot read the value: {exc}") from None


def _resolve(value: Any, base: Path) -> Any:
    if not isinstance(value, str) or not value or "://" in value or value in ("auto", "never"):
        return value
    return str((base / Path(value).expanduser()).resolve())


def resolve_paths(document: dict[str, Any], base: Path) -> None:
    entrypoint = document.get("entrypoint")
    if isinstance(entrypoint, dict):
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
