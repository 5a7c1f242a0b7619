"""The job spec's models read as a tree of dotted field paths: which field a
path names, what type it holds, the choices of a literal, and every path there
is. The error messages (``trainplane.jobs.spec_messages``) use it to say what a
field takes and to suggest the path a typo meant."""

from __future__ import annotations

import functools
import types
import typing
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel
from pydantic.fields import FieldInfo

_UNIONS = (Union, types.UnionType)


def core_type(annotation: Any) -> Any:
    """The type under ``Annotated`` and ``| None``: ``int | None`` is ``int``."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in _UNIONS:
            kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(kinds) != 1:
                return annotation
            annotation = kinds[0]
        else:
            return annotation


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The model an annotation holds, if it is one."""
    core = core_type(annotation)
    return core if isinstance(core, type) and issubclass(core, BaseModel) else None


def choices(annotation: Any) -> list[str] | None:
    """The values of a ``Literal`` field, as they are spelled in a spec."""
    core = core_type(annotation)
    if typing.get_origin(core) is Literal:
        return [str(value) for value in typing.get_args(core)]
    return None


def container(annotation: Any) -> tuple[str | None, Any]:
    """``("list", item type)``, ``("dict", value type)`` or ``(None, core)``."""
    core = core_type(annotation)
    origin = typing.get_origin(core)
    if origin is list:
        return "list", (typing.get_args(core) or (Any,))[0]
    if origin is dict:
        return "dict", (typing.get_args(core) or (Any, Any))[-1]
    return None, core


def field_at(root: type[BaseModel], parts: list[str]) -> FieldInfo | None:
    """The field a path names (``["resources", "gpus"]``); None when the path
    leaves the models (an unknown name, a free-form mapping's key)."""
    annotation: Any = root
    found: FieldInfo | None = None
    for part in parts:
        kind, inner = container(annotation)
        if kind is not None:
            annotation = inner  # a list's index or a mapping's key
            continue
        model = model_of(annotation)
        if model is None or part not in model.model_fields:
            return None
        found = model.model_fields[part]
        annotation = found.annotation
    return found


def model_at(root: type[BaseModel], parts: list[str]) -> type[BaseModel] | None:
    """The model whose fields sit at a path (the spec itself at ``[]``)."""
    if not parts:
        return root
    field = field_at(root, parts)
    if field is None:
        return None
    kind, inner = container(field.annotation)
    return model_of(inner if kind is not None else field.annotation)


@functools.cache
def all_paths(root: type[BaseModel]) -> tuple[str, ...]:
    """Every field of the spec by its dotted path, parents before children."""
    found: list[str] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            path = f"{prefix}{name}"
            found.append(path)
            inner = model_of(field.annotation)
            if inner is not None:
                walk(inner, path + ".")

    walk(root, "")
    return tuple(found)
