"""The most likely mistakes in a spec, and the exact message each gets: the
field by its path, what the field takes, and the fix where there is one. One
row a mistake; the API's 422 problems and ``load_spec`` say the same words
(``trainplane.jobs.spec_messages``)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from trainplane.jobs.spec import SpecError, load_spec, parse_spec
from trainplane.jobs.spec_messages import describe

TRAIN: dict[str, Any] = {
    "kind": "train",
    "name": "first",
    "entrypoint": {"command": ["python", "train.py"]},
}
FINETUNE: dict[str, Any] = {
    "kind": "finetune",
    "name": "tune",
    "base_model": "/models/tiny",
    "dataset": {"train": "/data/train.jsonl"},
}


def t(**fields: Any) -> dict[str, Any]:
    return {**TRAIN, **fields}


def f(**fields: Any) -> dict[str, Any]:
    return {**FINETUNE, **fields}


def without(spec: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k != key}


# (mistake, spec, the field named, the exact message)
MISTAKES: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "strategy given as its type",
        t(strategy="ddp"),
        "strategy",
        "`strategy` is a mapping like `{type: ddp}`, not `ddp`",
    ),
    (
        "retries given as a number",
        t(retries=3),
        "retries",
        "`retries` is a mapping like `{max_restarts: 3}`, not `3`",
    ),
    (
        "gpus spelled out",
        t(resources={"gpus": "two"}),
        "resources.gpus",
        "`resources.gpus` must be a whole number, like `2`; got `two`",
    ),
    (
        "half a gpu",
        t(resources={"gpus": 1.5}),
        "resources.gpus",
        "`resources.gpus` must be a whole number, like `2`; got `1.5`",
    ),
    (
        "zero gpus",
        t(resources={"gpus": 0}),
        "resources.gpus",
        "`resources.gpus` must be at least 1; got `0`",
    ),
    (
        "project with capitals and a space",
        t(project="My Project"),
        "project",
        (
            "`project` takes lowercase letters, digits, `-` and `_`, starting and ending with "
            "a letter or digit, at most 63 characters; got `My Project`; try `my-project`"
        ),
    ),
    (
        "job name with a space",
        t(name="my job"),
        "name",
        (
            "`name` takes letters, digits, `.`, `-` and `_`, starting and ending with a letter "
            "or digit, at most 128 characters; got `my job`; try `my-job`"
        ),
    ),
    (
        "job name that YAML reads as a number",
        t(name=5),
        "name",
        '`name` must be text; got the number `5` (quote it: `"5"`)',
    ),
    (
        "env at the top level",
        t(env={"WANDB_MODE": "offline"}),
        "env",
        "`env` is an unknown field: did you mean `entrypoint.env`?",
    ),
    (
        "resource for resources",
        t(resource={"gpus": 1}),
        "resource",
        "`resource` is an unknown field: did you mean `resources`?",
    ),
    (
        "gpus at the top level",
        t(gpus=2),
        "gpus",
        "`gpus` is an unknown field: did you mean `resources.gpus`?",
    ),
    (
        "gpu for gpus",
        t(resources={"gpu": 2}),
        "resources.gpu",
        "`resources.gpu` is an unknown field: did you mean `resources.gpus`?",
    ),
    (
        "every_step for every_steps",
        t(checkpoint={"every_step": 100}),
        "checkpoint.every_step",
        "`checkpoint.every_step` is an unknown field: did you mean `checkpoint.every_steps`?",
    ),
    (
        "lr for learning_rate",
        f(hyperparameters={"lr": 1e-4}),
        "hyperparameters.lr",
        "`hyperparameters.lr` is an unknown field: did you mean `hyperparameters.learning_rate`?",
    ),
    (
        "a field no spec has",
        t(colour="red"),
        "colour",
        (
            "`colour` is an unknown field; a spec takes name, project, resources, strategy, "
            "precision, model, checkpoint, retries, priority, max_runtime, stuck_after, "
            "tracking, register_model, kind, entrypoint, optimization"
        ),
    ),
    (
        "no entrypoint",
        without(TRAIN, "entrypoint"),
        "entrypoint",
        (
            "`entrypoint` is missing: a train job needs the code to run: one of `function`, "
            "`script` or `command`, like `entrypoint: {script: train.py}`"
        ),
    ),
    (
        "entrypoint with no form",
        t(entrypoint={"args": {"lr": 0.1}}),
        "entrypoint",
        (
            "`entrypoint` needs exactly one of `function`, `script` or `command`, like "
            "`{script: train.py}`; got none"
        ),
    ),
    (
        "entrypoint with two forms",
        t(entrypoint={"script": "train.py", "command": ["python"]}),
        "entrypoint",
        (
            "`entrypoint` needs exactly one of `function`, `script` or `command`; got script, "
            "command: keep one"
        ),
    ),
    (
        "entrypoint given as a script",
        t(entrypoint="train.py"),
        "entrypoint",
        "`entrypoint` is a mapping like `{script: train.py}`, not `train.py`",
    ),
    (
        "command as one string",
        t(entrypoint={"command": "python train.py"}),
        "entrypoint.command",
        "`entrypoint.command` is a list like `[python, train.py]`, not `python train.py`",
    ),
    (
        "pip as one string",
        t(entrypoint={"command": ["python"], "pip": "einops"}),
        "entrypoint.pip",
        "`entrypoint.pip` is a list like `[einops]`, not `einops`",
    ),
    (
        "env as a list of NAME=value",
        t(entrypoint={"command": ["python"], "env": ["WANDB_MODE=offline"]}),
        "entrypoint.env",
        "`entrypoint.env` is a mapping like `{WANDB_MODE: offline}`, not a list",
    ),
    (
        "no kind",
        without(TRAIN, "kind"),
        "kind",
        "`kind` is missing: say what the job is, one of `train`, `finetune` or `sweep`",
    ),
    (
        "kind misspelled",
        t(kind="training"),
        "kind",
        (
            "`kind` must be one of `train`, `finetune` or `sweep`; got `training`; did you "
            "mean `train`?"
        ),
    ),
    (
        "no name",
        without(TRAIN, "name"),
        "name",
        "`name` is missing: every job needs a name, like `name: my-job`",
    ),
    (
        "ZeRO as a strategy",
        t(strategy={"type": "zero3"}),
        "strategy.type",
        (
            "`strategy.type` must be one of `ddp`, `fsdp`, `deepspeed` or `auto`; got `zero3`; "
            "for ZeRO use `strategy: {type: deepspeed, deepspeed: {stage: 3}}`"
        ),
    ),
    (
        "precision in capitals",
        t(precision="BF16"),
        "precision",
        "`precision` must be one of `fp32`, `bf16` or `fp16`; got `BF16`; did you mean `bf16`?",
    ),
    (
        "ZeRO stage 4",
        t(strategy={"type": "deepspeed", "deepspeed": {"stage": 4}}),
        "strategy.deepspeed.stage",
        "`strategy.deepspeed.stage` must be at most 3; got `4`",
    ),
    (
        "keep no checkpoints",
        t(checkpoint={"keep_last": 0}),
        "checkpoint.keep_last",
        "`checkpoint.keep_last` must be at least 1; got `0`",
    ),
    (
        "a yes/no that is neither",
        t(strategy={"type": "fsdp", "fsdp": {"cpu_offload": "yes please"}}),
        "strategy.fsdp.cpu_offload",
        "`strategy.fsdp.cpu_offload` must be `true` or `false`; got `yes please`",
    ),
    (
        "parameters as 7B",
        t(model={"parameters": "7B"}),
        "model.parameters",
        "`model.parameters` must be a number: write `7B` as `7e9`",
    ),
    (
        "duration in words",
        t(max_runtime="24 hours"),
        "max_runtime",
        (
            "`max_runtime`: invalid duration '24 hours': use a number with a unit d, h, m or "
            "s, for example 24h, 90m or 1h30m"
        ),
    ),
    (
        "finetune without dataset",
        without(FINETUNE, "dataset"),
        "dataset",
        (
            "`dataset` is missing: a finetune job needs its data, like `dataset: {train: "
            "data/train.jsonl}`"
        ),
    ),
    (
        "dataset given as a path",
        f(dataset="data/train.jsonl"),
        "dataset",
        "`dataset` is a mapping like `{train: data/train.jsonl}`, not `data/train.jsonl`",
    ),
    (
        "method misspelled",
        f(method="qlora"),
        "method.type",
        "`method.type` must be `full` or `lora`; got `qlora`; did you mean `lora`?",
    ),
    (
        "register_model given as a name",
        t(register_model="my-model"),
        "register_model",
        "`register_model` is a mapping like `{name: my-model}`, not `my-model`",
    ),
]


def _described(spec: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as caught:
        parse_spec(spec)
    return [(m.path, m.message) for m in describe(caught.value.errors())]


@pytest.mark.parametrize(
    ("mistake", "spec", "field", "message"), MISTAKES, ids=[m[0] for m in MISTAKES]
)
def test_each_mistake_gets_one_message_that_names_the_field_and_teaches(
    mistake: str, spec: dict[str, Any], field: str, message: str
) -> None:
    assert _described(spec) == [(field, message)]
    assert f"`{field}`" in message  # it names the field
    assert "Input should be" not in message and "valid dictionary" not in message


def test_at_least_thirty_mistakes_are_covered() -> None:
    assert len({m[0] for m in MISTAKES}) >= 30


def test_several_mistakes_are_each_told_once_in_the_order_of_the_spec() -> None:
    spec = t(strategy="ddp", resource={"gpus": 1}, precision="fp8")
    assert [path for path, _ in _described(spec)] == ["strategy", "precision", "resource"]


def test_the_branches_of_a_union_are_one_error_of_their_field() -> None:
    class Either(BaseModel):
        limit: int | list[int]
        flag: dict[str, int] | bool | None = None

    with pytest.raises(ValidationError) as caught:
        Either.model_validate({"limit": "many", "flag": "maybe"})
    assert [m.path for m in describe(caught.value.errors())] == ["limit", "flag"]


def test_a_sweeps_trial_is_looked_up_as_the_job_it_runs() -> None:
    sweep = {
        "kind": "sweep",
        "name": "search",
        "trial": {"kind": "train", "entrypoint": {"command": ["x"]}, "resource": {"gpus": 1}},
        "parameters": {"resources.gpus": {"values": [1, 2]}},
        "objective": {"metric": "loss"},
    }
    assert _described(sweep) == [
        ("trial.resource", "`trial.resource` is an unknown field: did you mean `trial.resources`?")
    ]


def test_a_stored_spec_that_does_not_parse_says_the_same_words() -> None:
    with pytest.raises(SpecError, match=r"`strategy` is a mapping like `\{type: ddp\}`, not `ddp`"):
        load_spec(t(strategy="ddp"))
