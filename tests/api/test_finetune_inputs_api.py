"""A fine-tune's files are checked at the edge: every dataset or base-model
problem is a 422 from ``POST /v1/jobs`` and from ``POST /v1/jobs/plan`` naming
the field (and the line), with nothing created; a valid spec's plan says what
was checked and where the job would go. Real app, real databases, real files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.factories import count_rows, make_attempt, make_cluster, make_job
from trainplane.jobs.states import JobStatus


def _broken_dataset(tmp_path: Path, text: str) -> str:
    path = tmp_path / "broken.jsonl"
    path.write_text(text)
    return str(path)


def _not_causal(tmp_path: Path, files) -> str:
    folder = tmp_path / "bert"
    shutil.copytree(files.model, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="bert", architectures=["BertForMaskedLM"])
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def _no_config(tmp_path: Path, files) -> str:
    folder = tmp_path / "weights-only"
    folder.mkdir()
    shutil.copy(files.model / "model.safetensors", folder)
    return str(folder)


def _no_weights(tmp_path: Path, files) -> str:
    folder = tmp_path / "config-only"
    shutil.copytree(files.model, folder)
    (folder / "model.safetensors").unlink()
    return str(folder)


# (case, how to break the spec, field, words the message must contain)
PROBLEMS = [
    (
        "missing train file",
        lambda tmp, files: {"dataset": {"train": str(tmp / "nope.jsonl")}},
        "dataset.train",
        "does not exist",
    ),
    (
        "malformed line",
        lambda tmp, files: {
            "dataset": {
                "train": _broken_dataset(tmp, '{"prompt": "a", "completion": "b"}\nnot json\n')
            }
        },
        "dataset.train",
        "line 2 is not valid JSON",
    ),
    (
        "missing field",
        lambda tmp, files: {
            "dataset": {"train": _broken_dataset(tmp, '\n{"prompt": "x"}\n')},
        },
        "dataset.train",
        "line 2 has no 'completion' field",
    ),
    (
        "neither text nor prompt",
        lambda tmp, files: {"dataset": {"train": _broken_dataset(tmp, '{"question": "x"}\n')}},
        "dataset.train",
        "line 1 has neither 'text' nor 'prompt'",
    ),
    (
        "empty eval split",
        lambda tmp, files: {
            "dataset": {"train": str(files.train), "eval": _broken_dataset(tmp, "\n\n")}
        },
        "dataset.eval",
        "has no rows",
    ),
    (
        "model that is not a causal LM",
        lambda tmp, files: {"base_model": _not_causal(tmp, files)},
        "base_model",
        "is not a causal language model (architectures: BertForMaskedLM)",
    ),
    (
        "folder that is not a model",
        lambda tmp, files: {"base_model": _no_config(tmp, files)},
        "base_model",
        "no config.json",
    ),
    (
        "model without weights",
        lambda tmp, files: {"base_model": _no_weights(tmp, files)},
        "base_model",
        "has no weights",
    ),
    (
        "missing model",
        lambda tmp, files: {"base_model": str(tmp / "gone")},
        "base_model",
        "does not exist",
    ),
    (
        "relative path from an HTTP client",
        lambda tmp, files: {"dataset": {"train": "data/train.jsonl"}},
        "dataset.train",
        "is a relative path, which means nothing on the server",
    ),
]


@pytest.mark.parametrize(
    ("case", "breaking", "field", "words"), PROBLEMS, ids=[p[0] for p in PROBLEMS]
)
@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/jobs/plan"])
def test_each_input_problem_is_a_422_naming_the_field_and_nothing_is_created(
    api, session, finetune_files, server_dir, case, breaking, field, words, path
):
    spec = finetune_files.spec(**breaking(server_dir, finetune_files))
    answer = api.post(path, json=spec)
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert [e["field"] for e in problem["errors"]] == [field]
    assert words in problem["errors"][0]["message"]
    assert problem["detail"].startswith(f"{field}: ")
    assert count_rows(session) == (0, 0)


def test_every_bad_line_is_named_up_to_a_limit(api, session, finetune_files, server_dir):
    lines = ["[1]", "{}", '{"text": 3}', '{"text": ""}', "nope", "{", "also bad"]
    train = _broken_dataset(server_dir, "\n".join(lines) + "\n")
    answer = api.post("/v1/jobs", json=finetune_files.spec(dataset={"train": train}))
    assert answer.status_code == 422
    messages = [e["message"] for e in answer.json()["errors"]]
    assert len(messages) == 5  # the first five; one more run shows the rest
    assert messages[0].startswith("line 1 is a JSON list, not an object")
    assert messages[1].startswith("line 2 has neither 'text' nor 'prompt'")
    assert messages[2] == "line 3: 'text' is a int, not a string"
    assert messages[3] == "line 4: 'text' is empty"
    assert messages[4].startswith("line 5 is not valid JSON")
    assert count_rows(session) == (0, 0)


def test_a_dataset_mixing_formats_is_refused_at_the_first_odd_line(
    api, session, finetune_files, server_dir
):
    train = _broken_dataset(server_dir, '{"text": "a"}\n{"prompt": "b", "completion": "c"}\n')
    answer = api.post("/v1/jobs", json=finetune_files.spec(dataset={"train": train}))
    assert answer.status_code == 422
    assert answer.json()["errors"][0]["message"] == (
        "line 2 is prompt_completion but earlier lines have 'text'"
    )


def test_a_plan_checks_the_files_places_the_job_and_creates_nothing(api, session, finetune_files):
    make_cluster(session, "cpu-a", gpus=4)
    answer = api.post("/v1/jobs/plan", json=finetune_files.spec())
    assert answer.status_code == 200, answer.text
    plan = answer.json()
    assert plan["valid"] is True
    assert plan["spec"]["hyperparameters"]["lr_schedule"] == "cosine"  # defaults filled in
    assert {c["name"]: c["detail"] for c in plan["checks"]} == {
        "base_model": "LlamaForCausalLM (llama), weights in model.safetensors",
        "dataset.train": "240 rows, prompt/completion",
        "dataset.eval": "60 rows, prompt/completion",
    }
    assert plan["placement"] == {
        "cluster": "cpu-a",
        "can_start_now": True,
        "queue_position": 1,
        "reason": "would start now on cluster cpu-a",
        "expected_start_in_seconds": 0.0,
        "expected_start_basis": "it would start now on cluster cpu-a",
    }
    # The base model's config.json sizes the estimate of the spec's strategy.
    assert plan["strategy"]["chosen"] == "deepspeed zero-3 + optimizer offload"
    assert plan["memory"]["strategy"] == plan["strategy"]["chosen"]
    assert not any("activations" in note for note in plan["memory"]["notes"])
    assert count_rows(session) == (0, 0)


def test_a_plan_on_a_full_cluster_says_why_it_would_wait(api, session, finetune_files):
    cluster = make_cluster(session, "cpu-a", gpus=2)
    running = make_job(session, name="busy", status=JobStatus.RUNNING)
    make_attempt(session, running.id, cluster_id=cluster.id)
    make_job(session, name="queued-first")
    plan = api.post("/v1/jobs/plan", json=finetune_files.spec()).json()
    assert plan["placement"]["can_start_now"] is False
    assert plan["placement"]["cluster"] is None
    assert plan["placement"]["queue_position"] == 2
    assert plan["placement"]["reason"] == "waiting for 2 GPUs: cluster cpu-a has 0 free"


def test_a_plan_for_a_job_no_cluster_can_hold_is_a_422(api, session, finetune_files):
    make_cluster(session, "cpu-a", gpus=2)
    answer = api.post("/v1/jobs/plan", json=finetune_files.spec(resources={"gpus": 8}))
    assert answer.status_code == 422
    assert answer.json()["errors"][0]["field"] == "resources.gpus"


def test_a_plan_of_a_train_job_has_no_file_checks(api, session):
    from tests.factories import train_spec

    plan = api.post("/v1/jobs/plan", json=train_spec()).json()
    assert plan["checks"] == []
    assert plan["placement"]["reason"] == "waiting for a cluster: none is registered"


def test_a_dataset_smaller_than_one_step_is_refused(api, session, finetune_files):
    hyperparameters = {"micro_batch_size": 128, "max_steps": 5}
    answer = api.post("/v1/jobs", json=finetune_files.spec(hyperparameters=hyperparameters))
    assert answer.status_code == 422
    assert answer.json()["errors"] == [
        {
            "field": "dataset.train",
            "message": "240 rows are fewer than one step takes: micro_batch_size 128 x 2 GPUs "
            "= 256",
            "type": "invalid",
        }
    ]
    # Packed, the rows' tokens fill fewer blocks than rows: only the workers can tell.
    packed = finetune_files.spec(hyperparameters={**hyperparameters, "packing": True})
    assert api.post("/v1/jobs/plan", json=packed).status_code == 200
    assert count_rows(session) == (0, 0)
