"""What goes into a job's MLflow run: parameters, tags, metric names."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.factories import train_spec
from trainplane.jobs.spec import parse_spec
from trainplane.tracking.run_data import (
    AttemptFacts,
    attempt_tags,
    attempts_signature,
    experiment_name,
    key,
    run_params,
    run_tags,
    run_url,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _attempt(number: int, status: str = "RUNNING", cluster: str = "gpu-a") -> AttemptFacts:
    return AttemptFacts(
        number=number,
        id=f"a{number}",
        status=status,
        cluster=cluster,
        accelerator="H100",
        gpus=4,
        price_per_gpu_hour=2.0,
        created_at=NOW,
        started_at=NOW,
        finished_at=None,
        reason="",
    )


def _spec(**overrides):
    return parse_spec(train_spec(**overrides)).model_dump(mode="json")


def test_params_are_the_specs_set_paths_plus_placement():
    spec = _spec(
        strategy={"type": "deepspeed", "deepspeed": {"stage": 3}},
        entrypoint={"function": "train:loop", "args": {"lr": 0.001, "layers": [2, 4]}},
    )
    params = run_params(spec, [_attempt(1), _attempt(2, cluster="gpu-b")])
    assert params["strategy.type"] == "deepspeed"
    assert params["strategy.deepspeed.stage"] == "3"
    assert params["resources.gpus"] == "4" and params["nodes"] == "2"
    assert params["precision"] == "bf16"
    assert params["entrypoint.args.lr"] == "0.001"
    assert params["entrypoint.args.layers"] == "[2, 4]"
    # Parameters never change once logged: the first attempt's cluster.
    assert params["cluster"] == "gpu-a" and params["accelerator"] == "H100"
    assert "resources.gpu_type" not in params  # unset fields are not logged


def test_env_names_are_params_with_their_values_hidden_and_tracking_tags_are_not():
    spec = _spec(
        entrypoint={"function": "t:f", "env": {"HF_TOKEN": "hf_value"}, "secrets": {"K": "key"}}
    )
    params = run_params(spec, [])
    assert params["entrypoint.env.HF_TOKEN"] == "<hidden>"
    assert params["entrypoint.secrets.K"] == "key"  # a key's name, not its value
    assert not any(k.startswith("tracking.tags") for k in params)
    assert "hf_value" not in "".join(params.values())


def test_long_values_are_cut_to_what_every_server_takes():
    spec = _spec(entrypoint={"function": "t:f", "args": {"prompt": "x" * 2000}})
    assert len(run_params(spec, [])["entrypoint.args.prompt"]) == 500


def test_tags_name_the_job_and_carry_the_users_tags():
    tags = run_tags(
        job_id="j1",
        project="vision",
        kind="train",
        submitted_by="ci-bot",
        spec=_spec(),
        version="0.1.0",
        job_url="http://tp/v1/jobs/j1",
    )
    assert tags["trainplane.job_id"] == "j1" and tags["trainplane.project"] == "vision"
    assert tags["trainplane.submitter"] == "ci-bot" == tags["mlflow.user"]
    assert tags["trainplane.version"] == "0.1.0"
    assert tags["team"] == "vision"  # tracking.tags of the factory spec


def test_attempt_tags_and_their_signature_follow_the_attempts():
    running = [_attempt(1, "RUNNING")]
    failed = [_attempt(1, "FAILED"), _attempt(2, "PENDING")]
    assert attempt_tags(failed)["trainplane.attempts"] == "2"
    assert attempt_tags(failed)["trainplane.attempt.1"].startswith("FAILED on gpu-a")
    assert attempts_signature(running) != attempts_signature(failed)
    assert attempts_signature(failed) == attempts_signature(list(failed))


def test_metric_names_become_keys_mlflow_accepts():
    assert key("eval/loss") == "eval/loss"
    assert key("loss@train[0]") == "loss_train_0_"
    assert len(key("x" * 400)) == 250


def test_experiment_defaults_to_the_project():
    assert experiment_name({"tracking": {"experiment": "mnist"}}, "vision") == "mnist"
    assert experiment_name({"tracking": {}}, "vision") == "vision"


def test_run_links_only_with_a_ui_address():
    assert run_url(None, "1", "r") is None
    assert run_url("http://mlflow:5000/", "1", "r") == "http://mlflow:5000/#/experiments/1/runs/r"
