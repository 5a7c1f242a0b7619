"""A job spec as the SDK takes it (a mapping, a spec model, or the path of a
YAML/JSON file) turned into the JSON document the server validates."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeAlias

from pydantic import BaseModel

from trainplane.sdk.specfile import SpecFileError, apply_override, load_spec_file, resolve_paths

SpecInput: TypeAlias = Mapping[str, Any] | BaseModel | str | os.PathLike[str]


def spec_document(
    spec: SpecInput, *, project: str | None = None, overrides: Iterable[str] = ()
) -> dict[str, Any]:
    """The spec's fields, with ``overrides`` (``resources.gpus=4``, as the
    CLI's ``--set``) and ``project`` applied. A file's relative paths resolve
    against its folder, as ``trainplane submit`` resolves them; a mapping's
    or a model's against the current folder (a ``working_dir`` only if it
    names one). Raises ValueError for a file that cannot be read or an
    override that does not apply."""
    try:
        if isinstance(spec, str | os.PathLike):
            document = load_spec_file(Path(spec), list(overrides))
        else:
            if isinstance(spec, BaseModel):
                # Unset fields stay out: the server fills in its own defaults.
                document = spec.model_dump(mode="json", exclude_unset=True)
            else:
                document = copy.deepcopy(dict(spec))
            for override in overrides:
                apply_override(document, override)
            # Paths it names are this process's: relative to where it runs.
            resolve_paths(document, Path.cwd(), default_working_dir=False)
    except SpecFileError as exc:
        raise ValueError(str(exc)) from None
    if project is not None:
        document["project"] = project
    return document
