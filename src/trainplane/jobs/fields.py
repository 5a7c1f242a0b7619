"""A spec document as dotted paths to its leaves (``strategy.deepspeed.stage``),
the same paths ``--set`` takes. Used to log a job's parameters and to show how
jobs differ."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def flatten(document: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every leaf by its dotted path; lists and empty mappings are leaves."""
    leaves: dict[str, Any] = {}
    for key, value in document.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            leaves.update(flatten(value, f"{path}."))
        else:
            leaves[path] = value
    return leaves


def differences(documents: list[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The paths whose values are not the same in every document, each with
    the value in each document (None where a document lacks the path), in
    path order."""
    flat = [flatten(document) for document in documents]
    paths = sorted({path for leaves in flat for path in leaves})
    found = {}
    for path in paths:
        values = [leaves.get(path) for leaves in flat]
        if any(value != values[0] for value in values[1:]):
            found[path] = values
    return found
