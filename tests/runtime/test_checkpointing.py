"""Checkpoint policy, retention and resume through a TrainContext, in this
process as a world of one (the multi-worker paths run on Ray in test_training)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.factories import example_module
from trainplane.jobs.spec import parse_spec
from trainplane.runtime.context import TrainContext
from trainplane.runtime.reporting import ProgressReporter
from trainplane.storage import checkpoints as layout
from trainplane.storage.backends import StorageError, open_storage

pytestmark = [pytest.mark.ray_free, pytest.mark.usefixtures("one_rank_group")]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def one_rank(spec: dict[str, Any], **options: Any) -> TrainContext:
    """Rank 0 of a world of one, on the CPU."""
    return TrainContext(
        parse_spec(spec), rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), **options
    )


def mlp_train_loop() -> Any:
    return example_module("mlp").train_loop


def run(
    root: str,
    tmp_path: Path,
    *,
    steps: int,
    checkpoint: dict[str, Any],
    strategy: str = "ddp",
    name: str = "run",
    args: dict[str, Any] | None = None,
    **spec_fields: Any,
) -> tuple[dict[int, float], TrainContext]:
    metrics = tmp_path / f"{name}.jsonl"
    spec = {
        "kind": "train",
        "name": name,
        "entrypoint": {
            "function": "train:train_loop",
            "args": {"steps": steps, "hidden": 32, **(args or {})},
        },
        "resources": {"gpus": 1},
        "strategy": {"type": strategy},
        "checkpoint": checkpoint,
        **spec_fields,
    }
    context = one_rank(
        spec,
        checkpoint_root=root,
        reporter=ProgressReporter(
            url=None, job_id=None, attempt_id=None, token=None, metrics_file=str(metrics)
        ),
    )
    mlp_train_loop()(context)
    points = [json.loads(line) for line in metrics.read_text().splitlines()]
    return {p["step"]: p["metrics"]["loss"] for p in points}, context


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "proj" / "job" / "checkpoints")
    return f"s3://{request.getfixturevalue('s3_bucket')}/proj/job/checkpoints"


def steps_in(root: str) -> list[int]:
    return [folder.step for folder in layout.complete_checkpoints(open_storage(root))]


def test_keep_last_two_leaves_exactly_two(root: str, tmp_path: Path) -> None:
    run(root, tmp_path, steps=30, checkpoint={"every_steps": 5, "keep_last": 2})
    assert steps_in(root) == [25, 30]
    manifest = layout.latest_complete(open_storage(root))
    assert manifest is not None and manifest.manifest is not None
    assert manifest.manifest.strategy == "ddp" and manifest.manifest.world_size == 1
    assert {"model.pt", "optimizer.pt", "trainer/state.pt"} <= {
        f.path for f in manifest.manifest.files
    }
    assert all(len(f.sha256) == 64 for f in manifest.manifest.files)


def test_keep_best_keeps_the_best_by_the_metric(tmp_path: Path) -> None:
    root = str(tmp_path / "ckpt")
    losses, _ = run(
        root,
        tmp_path,
        steps=30,
        checkpoint={
            "every_steps": 5,
            "keep_last": 1,
            "keep_best": {"metric": "loss", "mode": "max"},
        },
    )
    saved = {step: losses[step] for step in (5, 10, 15, 20, 25, 30)}
    worst = max(saved, key=lambda step: saved[step])
    assert steps_in(root) == sorted({worst, 30})
    assert worst != 30  # the loss went down: the "best" by max is an early one


def test_resume_skips_a_checkpoint_without_manifest_and_continues_exactly(
    root: str, tmp_path: Path
) -> None:
    policy = {"every_steps": 5, "keep_last": 5}
    full, _ = run(root, tmp_path, steps=30, checkpoint=policy, name="full")

    other = root.replace("/job/", "/job2/")
    run(other, tmp_path, steps=30, checkpoint=policy, name="first")
    storage = open_storage(other)
    # As if the run died while saving step 20: that save has no manifest, and
    # the later ones never happened.
    storage.delete("step-20/manifest.json")
    for later in ("step-25", "step-30"):
        layout.remove(storage, later)
    resumed, context = run(other, tmp_path, steps=30, checkpoint=policy, name="second")

    assert context.resumed_from is not None and context.resumed_from.endswith("/step-15")
    assert min(resumed) == 16
    for step, loss in resumed.items():
        assert loss == pytest.approx(full[step], rel=1e-6, abs=1e-7), step
    assert steps_in(other) == [10, 15, 20, 25, 30]  # step 20 re-saved, complete


def test_resume_never_starts_over(tmp_path: Path) -> None:
    root = str(tmp_path / "ckpt")
    run(root, tmp_path, steps=10, checkpoint={"every_steps": 5})
    again, context = run(
        root, tmp_path, steps=10, checkpoint={"every_steps": 5, "resume": "never"}, name="again"
    )
    assert context.resumed_from is None and min(again) == 1


def test_resume_from_a_checkpoint_of_another_job(tmp_path: Path) -> None:
    source = str(tmp_path / "a" / "checkpoints")
    run(source, tmp_path, steps=10, checkpoint={"every_steps": 10})
    target = str(tmp_path / "b" / "checkpoints")
    continued, context = run(
        target,
        tmp_path,
        steps=15,
        checkpoint={"every_steps": 5, "resume": f"{source}/step-10"},
        name="b",
    )
    assert context.resumed_from == f"{source}/step-10"
    assert min(continued) == 11


def test_a_resume_uri_that_is_not_a_checkpoint_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="not a complete checkpoint"):
        run(
            str(tmp_path / "b"),
            tmp_path,
            steps=5,
            checkpoint={"resume": str(tmp_path / "nowhere" / "step-10")},
        )


def test_a_checkpoint_of_another_strategy_format_is_refused_clearly(tmp_path: Path) -> None:
    root = str(tmp_path / "ckpt")
    run(root, tmp_path, steps=5, checkpoint={"every_steps": 5})
    with pytest.raises(RuntimeError, match="strategy fsdp cannot load it"):
        run(root, tmp_path, steps=10, checkpoint={"every_steps": 5}, strategy="fsdp", name="f")


def test_every_minutes_saves_on_time(tmp_path: Path) -> None:
    root = str(tmp_path / "ckpt")
    # ~30 ms between saves at ~50 ms a step (the example's step_sleep): a
    # save after nearly every step, where no every_steps is set at all.
    run(
        root,
        tmp_path,
        steps=8,
        checkpoint={"every_minutes": 0.0005, "keep_last": 100},
        args={"step_sleep": 0.05},
    )
    assert len(steps_in(root)) >= 6


def frozen_first_layer_loop(ctx: TrainContext, steps: int) -> dict[int, float]:
    """Trains a net whose first layer is frozen (rebuilt the same every run,
    as a fine-tune's base weights are), checkpointing without it."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    model[0].requires_grad_(False)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = ctx.data_loader(data, batch_size=8)
    model, _ = ctx.prepare(
        model,
        lambda ps: torch.optim.AdamW([p for p in ps if p.requires_grad], lr=0.01),
        save_frozen=False,
    )
    ctx.restore()
    losses = {}
    for x, y in loader.forever():
        if ctx.global_step >= steps:
            break
        loss = ((model(x) - y) ** 2).mean()
        ctx.backward(loss)
        if ctx.step():
            losses[ctx.global_step] = loss.item()
            ctx.report({"loss": loss.item()})
    return losses


def saved_model_keys(folder: Path, strategy: str) -> set[str]:
    if strategy == "ddp":
        return set(torch.load(folder / "model.pt", weights_only=True))
    if strategy == "fsdp":
        import torch.distributed.checkpoint as dcp

        metadata = dcp.FileSystemReader(str(folder / "dcp")).read_metadata()
        return {k.removeprefix("model.") for k in metadata.state_dict_metadata if "model." in k}
    (states,) = folder.rglob("*model_states.pt")
    return set(torch.load(states, weights_only=False)["module"])


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "deepspeed"])
def test_a_checkpoint_without_the_frozen_parameters_resumes_exactly(
    strategy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DeepSpeed sets these for itself; they must not leak into later tests.
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "DS_ACCELERATOR"):
        monkeypatch.delenv(name, raising=False)

    def context(root: Path) -> TrainContext:
        spec = {
            "kind": "train",
            "name": "frozen",
            "entrypoint": {"function": "x:y"},
            "strategy": {"type": strategy},
            "checkpoint": {"every_steps": 5},
        }
        return one_rank(spec, checkpoint_root=str(root))

    whole = frozen_first_layer_loop(context(tmp_path / "a"), 10)
    frozen_first_layer_loop(context(tmp_path / "b"), 5)
    keys = saved_model_keys(tmp_path / "b" / "step-5", strategy)
    assert keys and not any(key.startswith("0.") for key in keys), keys
    assert {"2.weight", "2.bias"} <= keys
    resumed_context = context(tmp_path / "b")
    resumed = frozen_first_layer_loop(resumed_context, 10)
    assert resumed_context.resumed_from is not None and sorted(resumed) == list(range(6, 11))
    for step, loss in resumed.items():
        assert loss == pytest.approx(whole[step], rel=1e-6, abs=1e-7), step


def test_a_run_resumed_from_its_final_checkpoint_trains_nothing_and_ends_well(
    tmp_path: Path,
) -> None:
    """What Ray Train does when a worker dies after the last checkpoint."""
    root = str(tmp_path / "ckpt")
    run(root, tmp_path, steps=10, checkpoint={"every_steps": 5})
    spec = {
        "kind": "train",
        "name": "resumed",
        "entrypoint": {"function": "train:train_loop", "args": {"steps": 10, "hidden": 32}},
        "checkpoint": {"every_steps": 5},
    }
    context = one_rank(spec, checkpoint_root=root)
    assert mlp_train_loop()(context) == {"final_loss": None, "steps": 10}
    assert context.resumed_from is not None and context.resumed_from.endswith("/step-10")
