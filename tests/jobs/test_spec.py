"""The spec validator, without HTTP."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.factories import finetune_spec, train_spec
from tests.spec_cases import INVALID_SPECS
from trainplane.jobs.durations import format_duration, parse_duration
from trainplane.jobs.spec import FinetuneSpec, TrainSpec, parse_spec


def test_full_train_spec_round_trips():
    spec = parse_spec(train_spec())
    assert isinstance(spec, TrainSpec)
    assert spec.resources.nodes == 2
    assert spec.priority_rank == 100
    assert spec.max_runtime_seconds == 24 * 3600
    assert parse_spec(spec.model_dump(mode="json")) == spec


def test_minimal_train_spec_gets_defaults():
    spec = parse_spec({"kind": "train", "name": "x", "entrypoint": {"script": "train.py"}})
    assert spec.project == "default"
    assert spec.resources.gpus == 1 and spec.resources.nodes == 1
    assert spec.strategy.type == "ddp"
    assert spec.checkpoint.resume == "auto" and spec.checkpoint.keep_last == 3
    assert spec.retries.max_restarts == 0


def test_finetune_spec_with_lora_shorthand():
    spec = parse_spec(finetune_spec(method="lora"))
    assert isinstance(spec, FinetuneSpec)
    assert (spec.method.type, spec.method.r, spec.method.alpha) == ("lora", 8, 16.0)
    assert spec.hyperparameters.max_steps == 50 and spec.hyperparameters.epochs is None


def test_finetune_defaults_to_one_epoch():
    spec = parse_spec(finetune_spec(hyperparameters={}))
    assert spec.hyperparameters.epochs == 1.0


def test_env_values_become_strings():
    spec = parse_spec(
        train_spec(
            entrypoint={"command": ["x"], "env": {"THREADS": 4, "DEBUG": True}},
            register_model=None,
        )
    )
    assert spec.entrypoint.env == {"THREADS": "4", "DEBUG": "true"}


def test_storage_trailing_slash_is_normalised():
    spec = parse_spec(train_spec(checkpoint={"storage": "s3://bucket/ckpt/"}))
    assert spec.checkpoint.storage == "s3://bucket/ckpt"


@pytest.mark.parametrize(
    ("case", "spec", "field"), INVALID_SPECS, ids=[c[0] for c in INVALID_SPECS]
)
def test_invalid_spec_is_rejected(case, spec, field):
    with pytest.raises(ValidationError) as caught:
        parse_spec(spec)
    locations = {
        ".".join(str(p) for p in e["loc"] if p not in ("train", "finetune"))
        for e in caught.value.errors()
    }
    assert any(loc == field or loc.startswith(field + ".") for loc in locations) or (
        field == "kind" and caught.value.errors()[0]["type"].startswith("union_tag")
    ), (case, locations)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("24h", 86400), ("90m", 5400), ("1h30m", 5400), ("45s", 45), ("2d", 172800), ("1d1s", 86401)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "24", "1.5h", "-1h", "1m1h", "1 h", "0s"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@given(st.integers(min_value=1, max_value=10**8))
def test_duration_format_round_trips(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


def test_bare_seconds_are_accepted_as_duration():
    assert parse_spec(train_spec(max_runtime=5400)).max_runtime == "1h30m"


def test_a_job_may_name_its_own_metrics_file():
    spec = parse_spec(
        {
            **train_spec(),
            "entrypoint": {
                **train_spec()["entrypoint"],
                "env": {"TRAINPLANE_METRICS_FILE": "/tmp/metrics.jsonl"},
            },
        }
    )
    assert spec.entrypoint.env == {"TRAINPLANE_METRICS_FILE": "/tmp/metrics.jsonl"}


def with_env(env: dict, secrets: dict | None = None) -> dict:
    entrypoint = {**train_spec()["entrypoint"], "env": env, "secrets": secrets or {}}
    return {**train_spec(), "entrypoint": entrypoint}


def test_a_job_may_turn_the_rank_pool_off_for_itself_and_nothing_more():
    spec = parse_spec(with_env({"TRAINPLANE_RANK_POOL_IDLE_SECONDS": 0}))
    assert spec.entrypoint.env == {"TRAINPLANE_RANK_POOL_IDLE_SECONDS": "0"}
    with pytest.raises(ValidationError) as caught:
        parse_spec(with_env({"TRAINPLANE_RANK_POOL_IDLE_SECONDS": "86400"}))
    assert "entrypoint.env" in str(caught.value)
    assert "'TRAINPLANE_RANK_POOL_IDLE_SECONDS' may only be '0'" in str(caught.value)
    with pytest.raises(ValidationError, match="not from a secret"):
        parse_spec(with_env({}, {"TRAINPLANE_RANK_POOL_IDLE_SECONDS": "pool-idle"}))
