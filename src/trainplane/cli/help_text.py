"""What every ``--help`` shows besides the verb's own text: an "Examples:"
block (``EXAMPLES``, one place for all verbs, checked by tests/cli/test_help.py)
and a type column without noise: nothing for flags and arguments, a plain word
(``N``, ``TEXT``, ``PATH``) for a value, the choices for a choice."""

from __future__ import annotations

from typing import Any

import typer
import typer.core
import typer.main

# The verb's words -> command lines, shown as they are under "Examples:".
EXAMPLES: dict[str, list[str]] = {
    "up": ["trainplane up", "trainplane up --port 9000 --cpu"],
    "server": [
        "TRAINPLANE_DATABASE_URL=postgresql://... trainplane server --host 0.0.0.0",
        "trainplane server --no-scheduler --workers 4",
    ],
    "scheduler": ["TRAINPLANE_DATABASE_URL=postgresql://... trainplane scheduler"],
    "db upgrade": ["trainplane db upgrade"],
    "login": [
        "trainplane login https://trainplane.example.com --token tp_...",
        "trainplane login http://127.0.0.1:8080",
    ],
    "init": ["trainplane init", "trainplane init finetune --file finetune.yaml"],
    "submit": [
        "trainplane submit job.yaml",
        "trainplane submit job.yaml --wait --set resources.gpus=4",
        "trainplane submit job.yaml --fail-on 'eval_loss>2.0' -o json",
    ],
    "plan": ["trainplane plan job.yaml", "trainplane plan job.yaml --set resources.gpus=8 -o json"],
    "jobs list": [
        "trainplane jobs list",
        "trainplane jobs list -p vision -s running -s queued",
        "trainplane jobs list --all -o json",
    ],
    "jobs get": [
        "trainplane jobs get mlp-ddp",
        "trainplane jobs get 01jc3x -o yaml",
        "trainplane jobs get mlp-ddp -p vision -o json",
    ],
    "jobs cancel": ["trainplane jobs cancel mlp-ddp", "trainplane jobs cancel 01jc3x9k"],
    "jobs events": ["trainplane jobs events mlp-ddp", "trainplane jobs events 01jc3x -o json"],
    "jobs logs": ["trainplane jobs logs mlp-ddp", "trainplane jobs logs mlp-ddp -f --attempt 2"],
    "jobs metrics": [
        "trainplane jobs metrics mlp-ddp",
        "trainplane jobs metrics mlp-ddp --all -o json",
    ],
    "jobs checkpoints": ["trainplane jobs checkpoints mlp-ddp"],
    "jobs compare": [
        "trainplane jobs compare 01jc3x 01jc4a",
        "trainplane jobs compare run-a run-b -o json",
    ],
    "jobs trials": ["trainplane jobs trials lr-search", "trainplane jobs trials lr-search -o yaml"],
    "clusters add": [
        "trainplane clusters add h100 --address http://ray-head:8265 --accelerator H100 "
        "--gpus 64 --gpus-per-node 8",
    ],
    "clusters apply": ["trainplane clusters apply clusters.yaml"],
    "clusters list": ["trainplane clusters list", "trainplane clusters list -o json"],
    "clusters remove": ["trainplane clusters remove h100"],
    "projects list": ["trainplane projects list", "trainplane projects list -o json"],
    "projects create": ["trainplane projects create vision --description 'Image models'"],
    "projects update": [
        "trainplane projects update vision --max-gpus 16 --gpu-hours-per-month 2000",
        "trainplane projects update vision --no-gpu-limit",
    ],
    "models list": ["trainplane models list", "trainplane models list --all -o json"],
    "tokens create": [
        "trainplane tokens create ci --project vision --service --expires-in 90d",
        "trainplane tokens create first-admin --admin",
    ],
    "tokens list": ["trainplane tokens list", "trainplane tokens list -o json"],
    "tokens revoke": ["trainplane tokens revoke 01jc3x9k0000000000000000000"],
    "secrets set": [
        "trainplane secrets set vision HF_TOKEN --from-file token.txt",
        'echo "$WANDB_KEY" | trainplane secrets set vision WANDB_API_KEY',
    ],
    "secrets list": ["trainplane secrets list vision"],
    "secrets delete": ["trainplane secrets delete vision HF_TOKEN"],
}

HEADING = "Examples:"


def examples_epilog(lines: list[str]) -> str:
    # Paragraphs: the help formatter joins the lines of one, so each example
    # is its own (indented by the two spaces "\b" keeps in plain click).
    return "\n\n".join([HEADING, *(f"  {line}" for line in lines)])


# typer's type names (as in "<int range>", "<list[str]>") -> the word shown.
_TYPE_WORDS = {"int": "N", "float": "NUMBER", "Path": "PATH", "path": "PATH", "file": "PATH"}


def type_label(param: Any, ctx: Any) -> str | None:
    """The type column: nothing for flags and arguments (the name says it),
    the choices of a choice, else a plain word."""
    if getattr(param, "metavar", None):
        return param.metavar
    if param.param_type_name == "argument" or getattr(param, "is_flag", False):
        return None
    raw = (param.display_type(ctx) or "").strip("<>")
    inner = raw.removeprefix("list[").removesuffix("]")
    if "|" in inner:
        return inner
    return _TYPE_WORDS.get(inner.split(" ")[0], "TEXT")


def plain_type_column() -> None:
    """typer renders the type column with ``display_type_rich`` ("<bool>",
    "<list[str]>", "<int range>"): one replacement for every parameter, the
    help option too."""
    for kind in (typer.core.TyperOption, typer.core.TyperArgument):
        kind.display_type_rich = type_label  # type: ignore[method-assign]


def add_examples(app: typer.Typer, path: tuple[str, ...] = ()) -> None:
    """Each verb of ``app`` (and of its groups) with its ``EXAMPLES`` as the epilog."""
    for info in app.registered_commands:
        assert info.callback is not None
        name = info.name or typer.main.get_command_name(info.callback.__name__)
        lines = EXAMPLES.get(" ".join((*path, name)))
        if lines:
            info.epilog = examples_epilog(lines)
    for group in app.registered_groups:
        assert group.typer_instance is not None and group.name is not None
        add_examples(group.typer_instance, (*path, group.name))
