"""The files of this machine a spec names, and the checks they get before
anything is sent: the working folder exists and holds the function's module
or the script; a fine-tune's base model and datasets pass the same checks
the server would run on them (``recipes.finetune.inputs``, which reads files
only), so a broken dataset is refused here, not after gigabytes went up.

Paths are absolute by now: a spec file's resolve against its folder, a
mapping's against the current one (``sdk.specs``). ``s3://`` URIs and a job
that runs an uploaded bundle (``entrypoint.code``) name nothing local.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The fields of a fine-tune that name an input file or folder, in spec order.
INPUT_FIELDS = ("base_model", "dataset.train", "dataset.eval")


class LocalFilesError(ValueError):
    """What is wrong with the spec's local files: (field, message) pairs,
    all of them, found before anything was sent."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{name}: {message}" for name, message in problems))


@dataclass(frozen=True)
class LocalFiles:
    code: Path | None  # entrypoint.working_dir, to ship as a code bundle
    inputs: dict[str, Path] = field(default_factory=dict)  # spec field -> file or folder

    def __bool__(self) -> bool:
        return self.code is not None or bool(self.inputs)


def is_local(value: Any) -> bool:
    return isinstance(value, str) and os.path.isabs(value) and "://" not in value


def get_field(document: Mapping[str, Any], dotted: str) -> Any:
    node: Any = document
    for part in dotted.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def set_field(document: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A copy of ``document`` with the field at ``dotted`` (which exists) set."""
    head, _, rest = dotted.partition(".")
    if not rest:
        return {**document, head: value}
    return {**document, head: set_field(document[head], rest, value)}


def local_files(document: Mapping[str, Any]) -> LocalFiles:
    entrypoint = document.get("entrypoint")
    code = None
    if isinstance(entrypoint, Mapping) and not entrypoint.get("code"):
        folder = entrypoint.get("working_dir")
        code = Path(folder) if is_local(folder) else None
    inputs = {}
    if document.get("kind") == "finetune":
        for name in INPUT_FIELDS:
            value = get_field(document, name)
            if is_local(value):
                inputs[name] = Path(value)
    return LocalFiles(code, inputs)


def check_code(document: Mapping[str, Any], files: LocalFiles) -> None:
    """Raises LocalFilesError unless the working folder exists and holds what
    the entrypoint runs."""
    if files.code is None:
        return
    folder = files.code
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is not a folder"
        raise LocalFilesError([("entrypoint.working_dir", f"{folder} {what}")])
    entrypoint = document["entrypoint"]
    problems = []
    function, script = entrypoint.get("function"), entrypoint.get("script")
    if isinstance(function, str) and ":" in function:
        missing = _missing_module(folder, function.partition(":")[0], bool(entrypoint.get("pip")))
        if missing:
            problems.append(("entrypoint.function", missing))
    if isinstance(script, str) and not os.path.isabs(script) and not (folder / script).is_file():
        problems.append(("entrypoint.script", f"{script} is not a file in {folder}"))
    if problems:
        raise LocalFilesError(problems)


def _missing_module(folder: Path, module: str, has_pip: bool) -> str | None:
    """Why ``module`` cannot be imported from ``folder`` on the cluster, or
    None. A module installed on this machine (or by the job's ``pip``) is
    taken to be in the worker image too."""
    parts = module.split(".")
    place = folder.joinpath(*parts)
    if place.with_suffix(".py").is_file() or place.is_dir():
        return None
    if has_pip or importlib.util.find_spec(parts[0]) is not None:
        return None
    return (
        f"module {module!r} is not in {folder} (no {'/'.join(parts)}.py) and is not "
        "installed here; the job would fail to import it"
    )


def check_inputs(files: LocalFiles) -> None:
    """Raises LocalFilesError naming every input that is missing or wrong
    (the line of a dataset, what a model folder lacks)."""
    from trainplane.recipes.finetune import inputs

    problems: list[tuple[str, str]] = []
    for name, path in files.inputs.items():
        check = inputs.check_base_model if name == "base_model" else inputs.check_dataset
        try:
            check(name, str(path))
        except inputs.InputProblem as problem:
            problems.append((problem.field, problem.message))
        except inputs.InputProblems as many:
            problems += [(problem.field, problem.message) for problem in many.problems]
    if problems:
        raise LocalFilesError(problems)
