"""Dotted paths into a spec document, as ``--set`` takes them: ``resources.gpus``
names a nested field, and a number after a list's name indexes it
(``entrypoint.command.1``; one past the end appends). The CLI's overrides and a
sweep's parameters set values by the same rules; each names its own errors."""

from __future__ import annotations

from typing import Any


class PathError(ValueError):
    """A path that cannot be walked in the document; the message says where."""


def split_path(path: str) -> list[str]:
    parts = path.strip().split(".")
    if not path.strip() or not all(parts):
        raise PathError(f"{path.strip()!r} has an empty field name")
    return parts


def set_path(document: dict[str, Any], parts: list[str], value: Any) -> None:
    """Set ``value`` at ``parts``, making the missing mappings on the way."""
    node: Any = document
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth]) or "the spec"
        last = depth == len(parts) - 1
        if isinstance(node, list):
            index = _index(node, part, where, appending=last)
            if last:
                node[index : index + 1] = [value]
            else:
                node = node[index]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
        else:
            raise PathError(f"{where} is {_kind(node)}, so it has no field {part!r}")


def get_path(document: Any, parts: list[str]) -> Any:
    """The value at ``parts``; KeyError when there is none."""
    node = document
    for part in parts:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise KeyError(".".join(parts))
    return node


def _kind(value: Any) -> str:
    if value is None:
        return "empty (null)"
    return {str: "a string", int: "a number", float: "a number", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _index(node: list[Any], part: str, where: str, *, appending: bool) -> int:
    top = len(node) if appending else len(node) - 1
    if not part.isdigit() or int(part) > top:
        raise PathError(
            f"{where} is a list of {len(node)}; {part!r} is not an index of it (0..{top})"
        )
    return int(part)
