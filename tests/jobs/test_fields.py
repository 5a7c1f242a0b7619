"""Specs as dotted paths, and how specs differ."""

from __future__ import annotations

from trainplane.jobs.fields import differences, flatten


def test_flatten_names_every_leaf_by_its_path():
    spec = {
        "strategy": {"type": "deepspeed", "deepspeed": {"stage": 3, "config": {}}},
        "entrypoint": {"args": {"lr": 0.1}, "pip": ["x"]},
        "precision": "bf16",
    }
    assert flatten(spec) == {
        "strategy.type": "deepspeed",
        "strategy.deepspeed.stage": 3,
        "strategy.deepspeed.config": {},
        "entrypoint.args.lr": 0.1,
        "entrypoint.pip": ["x"],
        "precision": "bf16",
    }


def test_differences_keep_only_what_differs_with_each_value():
    a = {"strategy": {"type": "ddp"}, "resources": {"gpus": 2}, "name": "x"}
    b = {"strategy": {"type": "fsdp", "fsdp": {"cpu_offload": False}}, "resources": {"gpus": 2}}
    assert differences([a, b]) == {
        "name": ["x", None],
        "strategy.fsdp.cpu_offload": [None, False],
        "strategy.type": ["ddp", "fsdp"],
    }


def test_identical_documents_do_not_differ():
    spec = {"a": {"b": [1, 2]}, "c": None}
    assert differences([spec, dict(spec), dict(spec)]) == {}
