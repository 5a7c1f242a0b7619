"""What the spec's error messages say beyond pydantic's facts: an example of
each section, what a required field is, a name's rule in words (not its regex)
with a fixed-up name to try, and "did you mean" for a field the spec does not
have (the nearest paths by edit distance, and the names other tools use);
and how a path and a value are spelled in a message.

The wording lives here, apart from the models, so that the sentences of
``trainplane.jobs.spec_messages`` read the same for every field."""

from __future__ import annotations

import re
from typing import Any

import yaml
from pydantic import BaseModel

from trainplane.jobs.spec_tree import all_paths, model_at

# What a section looks like, for "`strategy` is a mapping like ..." when the
# value given does not suggest a better one.
EXAMPLES: dict[str, str] = {
    "entrypoint": "{script: train.py}",
    "resources": "{gpus: 2}",
    "strategy": "{type: ddp}",
    "strategy.deepspeed": "{stage: 3}",
    "strategy.fsdp": "{cpu_offload: true}",
    "checkpoint": "{every_steps: 500}",
    "checkpoint.keep_best": "{metric: eval_loss, mode: min}",
    "retries": "{max_restarts: 3}",
    "tracking": "{experiment: my-experiment}",
    "register_model": "{name: my-model}",
    "model": "{parameters: 7e9}",
    "optimization": "{grad_accum: 4}",
    "dataset": "{train: data/train.jsonl}",
    "hyperparameters": "{learning_rate: 2e-5}",
    "objective": "{metric: eval_loss, mode: min}",
    "search": "{algorithm: random, trials: 10}",
    "early_stop": "{algorithm: asha}",
    "entrypoint.env": "{WANDB_MODE: offline}",
    "entrypoint.secrets": "{HF_TOKEN: hf-token}",
    "entrypoint.args": "{learning_rate: 0.001}",
    "entrypoint.command": "[python, train.py]",
    "entrypoint.pip": "[einops, wandb]",
    "tracking.tags": "{team: nlp}",
    "method.target_modules": "[q_proj, v_proj]",
}

# What a required field is, for "`entrypoint` is missing: ...".
REQUIRED: dict[str, str] = {
    "name": "every job needs a name, like `name: my-job`",
    "entrypoint": "a train job needs the code to run: one of `function`, `script` or "
    "`command`, like `entrypoint: {script: train.py}`",
    "base_model": "a finetune job needs the model to start from, a local path or an "
    "s3:// URI, like `base_model: ./models/tiny`",
    "dataset": "a finetune job needs its data, like `dataset: {train: data/train.jsonl}`",
    "dataset.train": "the training data, a JSONL file's path or s3:// URI",
    "trial": "a sweep needs the job each trial runs, a train or finetune spec without "
    "name and project",
    "objective": "a sweep needs the metric it optimizes, like "
    "`objective: {metric: eval_loss, mode: min}`",
    "checkpoint.keep_best.metric": "the metric that ranks checkpoints, like `eval_loss`",
    "register_model.name": "the name to register the model under, like `my-model`",
}

# A name's rule in words, and how to make a name that follows it.
_NAME_RULES: dict[str, tuple[str, str]] = {
    "project": (
        "lowercase letters, digits, `-` and `_`, starting and ending with a letter or "
        "digit, at most 63 characters",
        "a-z0-9_-",
    ),
    "name": (
        "letters, digits, `.`, `-` and `_`, starting and ending with a letter or digit, "
        "at most 128 characters",
        "A-Za-z0-9._-",
    ),
    "register_model.name": (
        "letters, digits, `.`, `-`, `_` and `/`, starting and ending with a letter or "
        "digit, at most 256 characters",
        "A-Za-z0-9._/-",
    ),
    "register_model.alias": (
        "a letter, then letters, digits, `-` and `_`, at most 255 characters",
        "A-Za-z0-9_-",
    ),
    "entrypoint.code": (
        "a code bundle's digest as an upload returns it: `sha256:` and 64 hex digits",
        "",
    ),
    "entrypoint.secrets": (
        "a project secret's key: lowercase letters, digits, `.`, `_` and `-`, "
        "at most 128 characters",
        "a-z0-9._-",
    ),
}

# Names other tools (and habits) use for a field of the spec.
ALIASES: dict[str, str] = {
    "lr": "learning_rate",
    "batch_size": "micro_batch_size",
    "per_device_train_batch_size": "micro_batch_size",
    "gradient_accumulation_steps": "grad_accum",
    "num_train_epochs": "epochs",
    "steps": "max_steps",
    "num_gpus": "gpus",
    "gpu": "gpus",
    "gpu_count": "gpus",
    "accelerators": "gpus",
    "cpus": "cpus_per_worker",
    "timeout": "max_runtime",
    "run": "command",
    "cmd": "command",
    "requirements": "pip",
    "environment": "env",
}


def name_rule(path: str, value: Any) -> tuple[str, str | None] | None:
    """The rule of a name field in words, and a name that follows it (None
    when there is no such thing to offer)."""
    key = path if path in _NAME_RULES else re.sub(r"\.[^.]+$", "", path)
    if key not in _NAME_RULES and path.rsplit(".", 1)[-1] in ("name", "project"):
        key = path.rsplit(".", 1)[-1]
    if key not in _NAME_RULES:
        return None
    words, allowed = _NAME_RULES[key]
    fixed = None
    if allowed and isinstance(value, str):
        text = value.lower() if allowed.startswith("a-z") else value
        text = re.sub(f"[^{allowed}]+", "-", text).strip("-._/")
        fixed = text if text and text != value else None
    return words, fixed


def distance(a: str, b: str) -> int:
    """Levenshtein distance: edits that turn ``a`` into ``b``."""
    previous = list(range(len(b) + 1))
    for i, left in enumerate(a, 1):
        current = [i]
        for j, right in enumerate(b, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (left != right))
            )
        previous = current
    return previous[-1]


def close_to(word: str, candidates: list[str]) -> list[str]:
    """The candidates within a typo of ``word`` (or that it starts with:
    `training` for `train`), nearest first."""
    word = word.lower()
    reach = 1 if len(word) <= 4 else 2 if len(word) <= 8 else 3
    scored = sorted((distance(word, c.lower()), c) for c in candidates)
    near = [c for d, c in scored if d <= reach]
    return near or [c for _, c in scored if len(c) >= 3 and word.startswith(c.lower())]


def did_you_mean(root: type[BaseModel] | None, parent: list[str], key: str) -> list[str]:
    """Paths a key the spec does not have at ``parent`` probably meant: a
    sibling spelled nearly so, else the same (or nearly the same) name
    elsewhere in the spec, shortest paths first."""
    if root is None:
        return []
    here = model_at(root, parent)
    prefix = "".join(f"{p}." for p in parent)
    wanted = ALIASES.get(key.lower(), key)
    if here is not None:
        siblings = list(here.model_fields)
        if wanted in siblings and wanted != key:
            return [prefix + wanted]
        near = close_to(key, siblings)
        if near:
            return [prefix + near[0]]
    paths = [p for p in all_paths(root) if not p.startswith(prefix) or not prefix]
    same = [p for p in paths if p.rsplit(".", 1)[-1] == wanted and p != prefix + key]
    if not same:
        leaves = sorted({p.rsplit(".", 1)[-1] for p in paths})
        near = close_to(wanted, leaves)
        same = [p for p in paths if near and p.rsplit(".", 1)[-1] == near[0]]
    return sorted(same, key=lambda p: (p.count("."), p))[:3]


def fields_here(root: type[BaseModel] | None, parent: list[str]) -> list[str]:
    """The field names a mapping at ``parent`` takes."""
    here = model_at(root, parent) if root is not None else None
    return list(here.model_fields) if here is not None else []


def dotted(parts: list[Any]) -> str:
    """``resources.gpus``; list indexes as ``entrypoint.command[1]``."""
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def show(value: Any) -> str:
    """A value as a spec file would spell it, short."""
    if isinstance(value, str):
        text = value
    elif value is None or isinstance(value, bool | int | float | list | dict):
        text = yaml.safe_dump(value, default_flow_style=True, width=1_000_000).strip()
        text = text.removesuffix("\n...").removesuffix("...").strip()
    else:
        text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def given(value: Any) -> str:
    """What was given, as the end of "..., not ..." / "got ..."."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if value is None:
        return "an empty value"
    return f"`{show(value)}`"
