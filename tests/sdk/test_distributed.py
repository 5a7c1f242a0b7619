"""``@trainplane.distributed`` end to end: a real ``trainplane server``
scheduling on a real local Ray cluster (2 CPU worker slots, gloo). The
decorated functions are defined inside the tests, so they ship by value like a
notebook's, and use a model module written to a temporary folder, so that
module ships as the caller's local code."""

from __future__ import annotations

import importlib
import math
import sys
import textwrap
from collections.abc import Iterator

import pytest

import trainplane
from trainplane.sdk.call_errors import RemoteFunctionError
from trainplane.sdk.distributed import DistributedFunction

MODEL_MODULE = "sdk_tiny_mlp"
MODEL_SOURCE = '''
"""A tiny classifier and its data: a local module of the caller's."""
import torch
from torch.utils.data import TensorDataset


def dataset(samples=512, features=16, classes=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, features, generator=generator)
    labels = (inputs @ torch.randn(features, classes, generator=generator)).argmax(1)
    return TensorDataset(inputs, labels)


def model(features=16, classes=4):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(features, 64), torch.nn.GELU(), torch.nn.Linear(64, classes)
    )
'''


@pytest.fixture(scope="module")
def local_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    folder = tmp_path_factory.mktemp("caller-code")
    (folder / f"{MODEL_MODULE}.py").write_text(textwrap.dedent(MODEL_SOURCE))
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(MODEL_MODULE)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(MODEL_MODULE, None)


@pytest.fixture(scope="module")
def train(cluster_server: str, local_model: object) -> DistributedFunction:
    tiny = local_model

    @trainplane.distributed(
        gpus=2,
        strategy="ddp",
        client=trainplane.Client(cluster_server),
        checkpoint={"every_steps": 1000},
        max_runtime="10m",
        progress=True,
    )
    def train_tiny_mlp(ctx, steps: int, lr: float = 0.01) -> dict[str, float]:
        import torch

        model = tiny.model()
        model, _ = ctx.prepare(model, torch.optim.AdamW(model.parameters(), lr=lr))
        loader = ctx.data_loader(tiny.dataset(), batch_size=32, seed=0)
        ctx.total_steps = steps
        losses = []
        for inputs, labels in loader.forever():
            if ctx.global_step >= steps:
                break
            loss = torch.nn.functional.cross_entropy(model(inputs).float(), labels)
            ctx.backward(loss)
            if ctx.step():
                losses.append(ctx.mean(loss.detach()))
                ctx.report({"loss": losses[-1]})
        return {"first_loss": losses[0], "final_loss": losses[-1], "world": ctx.world_size}

    return train_tiny_mlp


def _assert_trained(result: dict[str, float]) -> None:
    assert result["world"] == 2
    assert math.isfinite(result["final_loss"])
    assert result["final_loss"] < result["first_loss"] * 0.9, result


def test_a_ddp_call_returns_rank_zeros_result_as_an_ordinary_job(
    train, cluster_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    call = train.submit(steps=12, lr=0.02)
    # The server outlives this test: a job still running if it fails would
    # hold the cluster's slots (and be retried) while the next test waits.
    with call.cancelled_if_abandoned(BaseException):
        result = call.result(timeout=240)
    _assert_trained(result)
    printed = capsys.readouterr()
    assert f"is job {call.job_id}" in printed.out
    assert "SUCCEEDED" in printed.err  # the progress line reached the end

    client = trainplane.Client(cluster_server)
    job = client.job(call.job_id)
    assert (job.status, job.name, job.gpus, job.strategy) == (
        "SUCCEEDED",
        "train_tiny_mlp",
        2,
        "ddp",
    )
    assert job.spec["entrypoint"]["code"].startswith("sha256:")
    # Reported like any job's: metrics, and the result record readable by anyone in the project.
    metrics = client.metrics(call.job_id)
    assert [p.step for p in metrics.points] == list(range(1, 13))
    assert metrics.points[-1].metrics["loss"] == pytest.approx(result["final_loss"])
    recorded = client.result(call.job_id)
    assert recorded.outcome == "returned" and recorded.rank == 0
    assert "final_loss" in recorded.value_repr


def test_the_same_function_under_deepspeed_zero2_returns_too(train) -> None:
    zero2 = train.options_with(strategy="deepspeed", deepspeed={"stage": 2})
    assert zero2.spec_for("sha256:" + "0" * 64)["strategy"]["deepspeed"]["stage"] == 2
    _assert_trained(zero2(steps=12, lr=0.02))


def test_a_function_that_raises_shows_the_remote_traceback_and_fails_the_job(
    cluster_server: str,
) -> None:
    client = trainplane.Client(cluster_server)

    def check_batch(size: int) -> None:
        if size % 2:
            raise ValueError(f"batch size {size} is odd")

    @trainplane.distributed(gpus=2, client=client, progress=False)
    def broken(ctx, size: int) -> None:
        if ctx.rank == 1:
            check_batch(size)
        import torch.distributed as dist

        dist.barrier()

    with pytest.raises(RemoteFunctionError) as raised:
        broken(33)
    error = raised.value
    assert error.remote_type == "ValueError" and error.remote_message == "batch size 33 is odd"
    assert error.result.rank == 1
    text = str(error)
    assert "Remote traceback" in text and "in check_batch" in text and "in broken" in text
    assert error.job.id in text
    job = client.job(error.job.id)
    assert job.status == "FAILED"
    assert "batch size 33 is odd" in job.reason
    assert isinstance(error, trainplane.JobFailed)


def test_a_sweep_of_the_function_runs_each_trial_with_its_own_arguments(train) -> None:
    search = train.options_with(gpus=1).sweep(
        steps=8,
        parameters={"lr": [0.001, 0.05]},
        objective="loss",
        search={"algorithm": "grid", "parallel": 2},
        name="tiny-mlp-lr",
    )
    with search.cancelled_if_abandoned(BaseException):
        sweep = search.result(timeout=240)
    trials = search.trials().items
    assert [(t.name, t.parameters, t.status, t.step) for t in trials] == [
        ("tiny-mlp-lr-1", {"entrypoint.args.lr": 0.001}, "SUCCEEDED", 8),
        ("tiny-mlp-lr-2", {"entrypoint.args.lr": 0.05}, "SUCCEEDED", 8),
    ]
    # Each trial's call got its own learning rate: the same data, other losses.
    assert trials[0].last_value != trials[1].last_value
    best = min(trials, key=lambda t: t.last_value)
    assert sweep.best_trial is not None and sweep.best_trial.id == best.id
    assert sweep.best_trial.objective.value == pytest.approx(best.last_value)
    returned = search.best_result()
    assert returned["world"] == 1
    assert returned["final_loss"] == pytest.approx(best.last_value)
