"""docs/spec.md is what ``python -m trainplane.jobs.spec_reference`` prints
from the spec's models, and every field it lists says what it is for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from trainplane.jobs.spec import FinetuneSpec, SweepSpec, TrainSpec, parse_spec
from trainplane.jobs.spec_reference import reference, rows

ROOT = Path(__file__).resolve().parents[1]


def test_docs_spec_md_is_generated_from_the_models():
    checked_in = (ROOT / "docs" / "spec.md").read_text()
    assert checked_in == reference(), (
        "docs/spec.md is stale: run `python -m trainplane.jobs.spec_reference > docs/spec.md`"
    )


def test_every_field_of_every_kind_is_described():
    undescribed = [
        f"{model.__name__}: {row.path}"
        for model in (TrainSpec, FinetuneSpec, SweepSpec)
        for row in rows(model)
        if not row.description
    ]
    assert not undescribed


def test_the_reference_names_the_fields_people_look_for():
    text = reference()
    for path in (
        "resources.gpu_type",
        "resources.cpus_per_worker",
        "checkpoint.every_minutes",
        "entrypoint.pip",
        "strategy.deepspeed.stage",
        "hyperparameters.lr_schedule",
        "early_stop.min_steps",
    ):
        assert f"| `{path}` |" in text, path
    assert (
        '| `strategy.type` | string | `"ddp"` | one of `ddp`, `fsdp`, `deepspeed`, `auto` |' in text
    )


def test_the_module_prints_the_reference():
    printed = subprocess.run(
        [sys.executable, "-m", "trainplane.jobs.spec_reference"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert printed.stdout == reference()


def test_the_example_at_the_top_is_a_valid_spec():
    block = reference().split("```yaml\n", 1)[1].split("```", 1)[0]
    spec = parse_spec(yaml.safe_load(block))
    assert spec.kind == "train" and spec.resources.gpus == 8
