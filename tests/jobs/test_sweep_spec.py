"""The sweep spec: each rule refused at parse with the field to fix (as the API's
422 names it), trials built from the template by their parameters' paths, the
grid's order and size, and a stored sweep that attempts never load."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from trainplane.api.problems import validation_problem
from trainplane.jobs.spec import (
    FinetuneSpec,
    SpecError,
    SweepSpec,
    TrainSpec,
    load_spec,
    load_sweep_spec,
    parse_spec,
)
from trainplane.sdk.specfile import load_spec_file

TRIAL: dict[str, Any] = {
    "kind": "train",
    "entrypoint": {
        "function": "train:train_loop",
        "working_dir": "/srv/mlp",
        "args": {"steps": 60},
    },
    "resources": {"gpus": 1},
    "strategy": {"type": "ddp"},
}
FINETUNE_TRIAL: dict[str, Any] = {
    "kind": "finetune",
    "base_model": "s3://models/tiny-llama",
    "dataset": {"train": "/data/train.jsonl"},
    "method": "lora",
    "hyperparameters": {"max_steps": 50},
}


def sweep(**fields: Any) -> dict[str, Any]:
    document = {
        "kind": "sweep",
        "name": "lr",
        "project": "vision",
        "trial": copy.deepcopy(TRIAL),
        "parameters": {
            "entrypoint.args.lr": {"distribution": "log_uniform", "low": 1e-5, "high": 0.3}
        },
        "objective": {"metric": "loss"},
        "search": {"algorithm": "random", "trials": 8, "parallel": 2, "seed": 7},
        "early_stop": {"algorithm": "asha", "min_steps": 10},
        "register_model": {"name": "lr-best", "alias": "best"},
    }
    document.update(fields)
    return document


def fields_of(document: dict[str, Any]) -> dict[str, str]:
    """The 422's fields and messages, as the API would answer."""
    with pytest.raises(ValidationError) as caught:
        parse_spec(document)
    errors = [{**e, "loc": ("body", *e["loc"])} for e in caught.value.errors()]
    problem = validation_problem(errors)
    return {e["field"]: e["message"] for e in json.loads(problem.body)["errors"]}


def test_a_sweep_parses_with_its_defaults_resolved():
    spec = parse_spec(sweep())
    assert isinstance(spec, SweepSpec)
    assert spec.trial_kind == "train"
    assert spec.early_stop.reduction_factor == 3  # asha's default
    assert spec.search.trials == 8 and spec.trial_count == 8
    assert spec.max_trial_gpus() == 1
    assert spec.grid is None
    defaulted = parse_spec(sweep(search={"algorithm": "tpe"}))
    assert defaulted.search.trials == 10  # stored explicit: the default depends on the grid


def test_a_trial_is_the_template_with_its_parameters_set():
    spec = parse_spec(
        sweep(
            parameters={
                "entrypoint.args.lr": {"distribution": "uniform", "low": 0.01, "high": 0.1},
                "strategy.type": {"values": ["ddp", "fsdp"]},
                "resources.gpus": {"values": [1, 4]},
            },
            priority="high",
        )
    )
    trial = spec.trial_spec(
        {"entrypoint.args.lr": 0.05, "strategy.type": "fsdp", "resources.gpus": 4}, 3
    )
    assert isinstance(trial, TrainSpec)
    assert trial.name == "lr-3" and trial.project == "vision" and trial.priority == "high"
    assert trial.entrypoint.args == {"steps": 60, "lr": 0.05}
    assert trial.strategy.type == "fsdp" and trial.resources.gpus == 4
    assert trial.register_model is not None and trial.register_model.name == "lr-best"
    assert spec.max_trial_gpus() == 4 and spec.trial_gpus() == (1, 4)
    # The template is untouched: every trial starts from it.
    assert (
        spec.trial["strategy"] == {"type": "ddp"} and "lr" not in spec.trial["entrypoint"]["args"]
    )


def test_a_trial_sets_its_own_priority_over_the_sweeps():
    spec = parse_spec(sweep(trial={**TRIAL, "priority": "low"}, priority="high"))
    assert spec.trial_spec({"entrypoint.args.lr": 0.01}, 1).priority == "low"


def test_the_grid_is_every_combination_in_a_fixed_order():
    spec = parse_spec(
        sweep(
            parameters={
                "strategy.type": {"values": ["ddp", "fsdp"]},
                "entrypoint.args.batch": {"values": [16, 32, 64]},
            },
            search={"algorithm": "grid", "parallel": 2},
            early_stop={"algorithm": "none"},
        )
    )
    assert spec.search.trials == 6 and spec.grid_size == 6
    # Paths sorted (a stored document keeps no key order), the last varying fastest.
    assert spec.grid == [
        {"entrypoint.args.batch": b, "strategy.type": s}
        for b in (16, 32, 64)
        for s in ("ddp", "fsdp")
    ]
    reloaded = load_sweep_spec(spec.model_dump(mode="json"))
    assert reloaded.grid == spec.grid and reloaded == spec


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (
            {"parameters": {"resources.colour": {"values": [1]}}},
            "parameters.resources.colour",
            "not a field of the trial spec",
        ),
        (
            {"parameters": {"resources.gpus.x": {"values": [1]}}},
            "parameters.resources.gpus.x",
            "not a field of the trial spec",
        ),
        (
            {"parameters": {"strategy.type": {"distribution": "log_uniform", "low": 1, "high": 2}}},
            "parameters.strategy.type",
            "log_uniform cannot apply to strategy.type",
        ),
        (
            {"parameters": {"resources.gpus": {"distribution": "uniform", "low": 1, "high": 4}}},
            "parameters.resources.gpus",
            "use int_uniform",
        ),
        (
            {"parameters": {"strategy.type": {"values": ["ddp", "bogus"]}}},
            "parameters.strategy.type",
            'value "bogus"',
        ),
        (
            {"parameters": {"resources.gpus": {"values": [1, 0]}}},
            "parameters.resources.gpus",
            "value 0",
        ),
        (
            {"parameters": {"entrypoint.args.lr": {"values": [0.1, 0.1]}}},
            "parameters.entrypoint.args.lr.values",
            "listed twice",
        ),
        (
            {"parameters": {"entrypoint.args.lr": {"values": [1], "distribution": "uniform"}}},
            "parameters.entrypoint.args.lr",
            "either values or a distribution",
        ),
        (
            {"parameters": {"entrypoint.args.lr": {"distribution": "uniform", "low": 1}}},
            "parameters.entrypoint.args.lr.high",
            "required with uniform",
        ),
        (
            {
                "parameters": {
                    "entrypoint.args.lr": {"distribution": "uniform", "low": 2, "high": 1}
                }
            },
            "parameters.entrypoint.args.lr.high",
            "greater than low",
        ),
        (
            {
                "parameters": {
                    "entrypoint.args.lr": {"distribution": "log_uniform", "low": 0, "high": 1}
                }
            },
            "parameters.entrypoint.args.lr.low",
            "low > 0",
        ),
        (
            {
                "parameters": {
                    "entrypoint.args.n": {"distribution": "int_uniform", "low": 1.5, "high": 4}
                }
            },
            "parameters.entrypoint.args.n.low",
            "whole numbers",
        ),
        ({"parameters": {}}, "parameters", "at least 1"),
        ({"parameters": {"name": {"values": ["a"]}}}, "parameters.name", "set by the sweep"),
        (
            {
                "parameters": {
                    "entrypoint.args": {"values": [{}]},
                    "entrypoint.args.lr": {"values": [1]},
                }
            },
            "parameters.entrypoint.args.lr",
            "inside parameter entrypoint.args",
        ),
        (
            {
                "parameters": {
                    "precision": {"values": ["bf16", "fp16"]},
                    "strategy.type": {"values": ["ddp", "fsdp"]},
                }
            },
            "parameters",
            'precision="fp16", strategy.type="fsdp" together',
        ),
        (
            {"search": {"algorithm": "grid"}},
            "parameters.entrypoint.args.lr",
            "grid search takes values",
        ),
        (
            {
                "parameters": {"strategy.type": {"values": ["ddp", "fsdp", "deepspeed"]}},
                "search": {"algorithm": "grid", "trials": 2},
            },
            "search.trials",
            "cannot cover the grid's 3 combinations",
        ),
        ({"search": {"trials": 4, "parallel": 5}}, "search.parallel", "more than the sweep's 4"),
        ({"search": {"parallel": 11}}, "search.parallel", "more than the sweep's 10"),
        ({"early_stop": {"algorithm": "asha"}}, "early_stop.min_steps", "required with asha"),
        (
            {"early_stop": {"algorithm": "none", "min_steps": 5}},
            "early_stop.min_steps",
            "only applies",
        ),
        (
            {"early_stop": {"algorithm": "median", "min_steps": 5, "reduction_factor": 2}},
            "early_stop.reduction_factor",
            "only applies to asha",
        ),
        ({"trial": {**TRIAL, "name": "x"}}, "trial.name", "set by the sweep"),
        ({"trial": {**TRIAL, "kind": "sweep"}}, "trial.kind", "train or finetune"),
        ({"trial": {**TRIAL, "resources": {"gpus": -1}}}, "trial.resources.gpus", "greater than"),
        ({"name": "x" * 121}, "name", "at most 120 characters"),
        ({"objective": {"metric": ""}}, "objective.metric", "must not be empty"),
    ],
)
def test_each_rule_is_refused_naming_its_field(change, field, words):
    problems = fields_of(sweep(**change))
    assert field in problems, problems
    assert words in problems[field], problems


def test_a_finetune_objective_must_be_one_its_trials_report():
    document = sweep(
        trial=copy.deepcopy(FINETUNE_TRIAL),
        parameters={"hyperparameters.learning_rate": {"values": [1e-4, 3e-4]}},
        objective={"metric": "eval_loss"},
    )
    assert "set trial.dataset.eval" in fields_of(document)["objective.metric"]
    document["objective"] = {"metric": "accuracy"}
    assert "does not report 'accuracy'" in fields_of(document)["objective.metric"]
    document["objective"] = {"metric": "loss"}
    spec = parse_spec(document)
    trial = spec.trial_spec({"hyperparameters.learning_rate": 3e-4}, 2)
    assert isinstance(trial, FinetuneSpec) and trial.hyperparameters.learning_rate == 3e-4
    with_eval = copy.deepcopy(document)
    with_eval["trial"]["dataset"]["eval"] = "/data/eval.jsonl"
    with_eval["objective"] = {"metric": "eval_loss", "mode": "min"}
    assert parse_spec(with_eval).objective.metric == "eval_loss"


def test_a_stored_sweep_is_never_loaded_as_a_job_to_run():
    stored = parse_spec(sweep()).model_dump(mode="json")
    with pytest.raises(SpecError, match="sweep"):
        load_spec(stored)
    assert load_sweep_spec(stored).trial_count == 8
    with pytest.raises(SpecError, match=r"search\.parallel"):
        load_sweep_spec({**stored, "search": {**stored["search"], "parallel": 0}})


def test_a_sweep_files_trial_paths_resolve_against_its_folder(tmp_path: Path):
    (tmp_path / "sweep.yaml").write_text(
        "kind: sweep\nname: lr\n"
        "trial: {kind: train, entrypoint: {function: 'train:train_loop', working_dir: .}}\n"
        "parameters: {entrypoint.args.lr: {values: [0.1, 0.01]}}\n"
        "objective: {metric: loss}\n"
    )
    document = load_spec_file(tmp_path / "sweep.yaml", ["search.parallel=2"])
    assert document["trial"]["entrypoint"]["working_dir"] == str(tmp_path.resolve())
    assert "entrypoint" not in document  # a sweep has no entrypoint of its own
    assert parse_spec(document).search.parallel == 2
