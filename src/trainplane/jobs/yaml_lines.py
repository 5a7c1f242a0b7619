"""Where a field is in a spec file: the line of each dotted path
(``resources.gpus``, ``entrypoint.command[1]``), read from the YAML's node
marks, so an error about a field can point at the line to edit. Also the
words for a file that is not YAML at all: its name, line and column.

JSON is YAML too, so a ``.json`` spec gets its lines the same way.
"""

from __future__ import annotations

import re

import yaml

_PART = re.compile(r"[^.\[\]]+|\[\d+\]")


def path_parts(path: str) -> list[str | int]:
    """``a.b[1].c`` (or ``a.b.1.c``) as ``["a", "b", 1, "c"]``."""
    parts: list[str | int] = []
    for token in _PART.findall(path):
        parts.append(int(token[1:-1]) if token.startswith("[") else token)
    return parts


def _compose(text: str) -> yaml.Node | None:
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None


def line_of(text: str, path: str) -> int | None:
    """The 1-based line of the field at ``path``: its key's line (a list
    item's own line), or, for a field the file does not have (a missing one),
    the line of the nearest section it would go in. None for the spec
    itself, for a field missing at the top, or a file that does not parse."""
    node = _compose(text)
    line = None
    for part in path_parts(path):
        if isinstance(node, yaml.MappingNode):
            found = _entry(node, part)
            if found is None:
                break
            key, node = found
            line = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and _index(part) is not None:
            index = _index(part)
            if index is None or index >= len(node.value):
                break
            node = node.value[index]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _entry(node: yaml.MappingNode, part: str | int) -> tuple[yaml.Node, yaml.Node] | None:
    for key, value in node.value:
        if isinstance(key, yaml.ScalarNode) and key.value == str(part):
            return key, value
    return None


def _index(part: str | int) -> int | None:
    if isinstance(part, int):
        return part
    return int(part) if part.isdigit() else None


def describe_yaml_error(exc: yaml.YAMLError, name: str) -> str:
    """A parse error as "``name``, line L, column C: what is wrong"."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    where = f"{name}, line {mark.line + 1}, column {mark.column + 1}" if mark else name
    words = f"{problem} ({context})" if context else problem
    return f"{where}: not valid YAML: {words}"
