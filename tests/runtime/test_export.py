"""Exporting the trained model for registration: the user's module rebuilt
outside any strategy, saved as an MLflow model with a manifest written last.

In this process as a world of one, and as two ranks under torchrun for the
strategies that shard (FSDP2, ZeRO-3), where the exported model must compute
what the sharded one computed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.conftest import TORCH_EXTENSIONS_CACHE
from tests.runtime.test_checkpointing import mlp_train_loop
from trainplane.jobs.spec import parse_spec
from trainplane.runtime.context import TrainContext
from trainplane.runtime.model_export import ModelExportError, rebuilt, structure_of
from trainplane.storage import exported_models as layout
from trainplane.storage.backends import open_storage

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PROBE = torch.randn(5, 32, generator=torch.Generator().manual_seed(7))


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.tensor(3.0), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens)) * self.scale


def test_the_structure_takes_no_parameter_memory_and_keeps_what_state_dicts_miss():
    model = Tied()
    structure = structure_of(model)
    assert all(p.is_meta for p in structure.parameters())
    assert structure.head.weight is structure.embed.weight  # still tied
    assert structure.scale.item() == 3.0  # a non-persistent buffer, kept
    state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    rebuilt_model = rebuilt(structure, state)
    assert rebuilt_model.embed.weight.dtype == torch.float32  # the user's dtype
    assert rebuilt_model.head.weight is rebuilt_model.embed.weight
    # It computes what the model does with those (bf16-rounded) weights.
    model.load_state_dict({k: v.float() for k, v in state.items()})
    tokens = torch.tensor([[1, 2, 3]])
    assert torch.equal(rebuilt_model(tokens), model(tokens))


def _spec(strategy: str, steps: int = 5) -> dict[str, Any]:
    return {
        "kind": "train",
        "name": "export",
        "entrypoint": {"function": "train:train_loop", "args": {"steps": steps, "hidden": 32}},
        "resources": {"gpus": 1},
        "strategy": {"type": strategy},
        "register_model": {"name": "m"},
    }


def _context(model_root: str, spec: dict[str, Any] | None = None) -> TrainContext:
    """Rank 0 of a world of one, exporting to ``model_root``."""
    return TrainContext(
        parse_spec(spec or _spec("ddp")),
        rank=0,
        local_rank=0,
        world_size=1,
        device=torch.device("cpu"),
        job_id="job-1",
        model_root=model_root,
    )


def _train(spec: dict[str, Any], model_root: str) -> TrainContext:
    context = _context(model_root, spec)
    mlp_train_loop()(context)
    return context


def _load(model_root: str, tmp_path: Path) -> Any:
    import mlflow.pytorch

    storage = open_storage(model_root)
    manifest, problem = layout.read_manifest(storage)
    assert manifest is not None, problem
    local = tmp_path / "downloaded"
    storage.get_tree(layout.MLFLOW_FOLDER, local)
    return manifest, mlflow.pytorch.load_model(str(local))


@pytest.mark.usefixtures("one_rank_group")
@pytest.mark.parametrize(
    ("strategy", "where"), [("ddp", "local"), ("fsdp", "local"), ("ddp", "s3")]
)
def test_the_exported_model_computes_what_the_trained_one_does(
    strategy: str, where: str, tmp_path: Path, request: pytest.FixtureRequest
):
    if where == "s3":
        root = f"s3://{request.getfixturevalue('s3_bucket')}/default/job-1/model"
    else:
        root = str(tmp_path / "default" / "job-1" / "model")
    context = _train(_spec(strategy), root)
    assert context.export_model() == root
    written = layout.read_manifest(open_storage(root))[0]
    assert context.export_model() == root  # again at the same step: nothing new
    assert layout.read_manifest(open_storage(root))[0] == written
    manifest, loaded = _load(root, tmp_path)
    assert (manifest.flavor, manifest.serialization) == ("pytorch", "pt2")
    assert manifest.step == 5 and manifest.strategy == strategy and "loss" in manifest.metrics
    assert all(entry.path.startswith("mlflow/") for entry in manifest.files)
    model = context.unwrap()
    model.eval()
    with torch.no_grad():
        assert torch.allclose(loaded(PROBE), model(PROBE), atol=1e-5)
    assert loaded(PROBE[:1]).shape == (1, 8)  # the batch dimension stayed dynamic


@pytest.mark.usefixtures("one_rank_group")
def test_a_new_export_replaces_the_old_one(tmp_path: Path):
    root = str(tmp_path / "model")
    _train(_spec("ddp", steps=3), root).export_model()
    _train(_spec("ddp", steps=6), root).export_model()
    manifest, _ = layout.read_manifest(open_storage(root))
    assert manifest is not None and manifest.step == 6
    assert not (tmp_path / "model" / ".staging" / "export").exists()


@pytest.mark.usefixtures("one_rank_group")
def test_a_model_without_an_input_example_is_pickled_with_its_code(tmp_path: Path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "kwmodel.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn

            class KeywordModel(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.linear = nn.Linear(32, 8)

                def forward(self, x, *, scale=1.0):
                    return self.linear(x) * scale
            """
        )
    )
    sys.path.insert(0, str(code))
    cwd = os.getcwd()
    os.chdir(code)  # the job's working_dir
    try:
        import kwmodel

        root = str(tmp_path / "model")
        context = _context(root)
        model, _ = context.prepare(kwmodel.KeywordModel(), lambda p: torch.optim.SGD(p))
        model(PROBE, scale=2.0)
        context.export_model()
        expected = context.unwrap()(PROBE, scale=2.0)
    finally:
        os.chdir(cwd)
        sys.path.remove(str(code))
        sys.modules.pop("kwmodel", None)
    manifest, _ = layout.read_manifest(open_storage(root))
    assert manifest is not None and manifest.serialization == "pickle"
    torch.save(PROBE, tmp_path / "probe.pt")
    # Loaded elsewhere, where the module does not exist: its code is inside.
    check = (
        "import sys, torch, mlflow.pytorch; "
        f"m = mlflow.pytorch.load_model({str(tmp_path / 'model' / 'mlflow')!r}); "
        f"print(m(torch.load({str(tmp_path / 'probe.pt')!r}), scale=2.0).sum().item())"
    )
    out = subprocess.run(
        [sys.executable, "-c", check],
        cwd=tmp_path,
        env={**os.environ, "MLFLOW_ALLOW_PICKLE_DESERIALIZATION": "true"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert float(out.stdout.strip().splitlines()[-1]) == pytest.approx(
        expected.sum().item(), abs=1e-4
    )


@pytest.mark.usefixtures("one_rank_group")
def test_registering_without_a_prepared_model_is_a_clear_error(tmp_path: Path):
    context = _context(str(tmp_path))
    with pytest.raises(RuntimeError, match=r"never called ctx.prepare"):
        context.export_model()


@pytest.mark.usefixtures("one_rank_group")
def test_a_model_that_cannot_be_copied_fails_the_export_with_the_reason(tmp_path: Path):
    import threading

    model = nn.Linear(32, 8)
    model.lock = threading.Lock()  # deepcopy cannot copy a lock
    context = _context(str(tmp_path / "model"))
    context.prepare(model, lambda p: torch.optim.SGD(p))
    with pytest.raises(ModelExportError, match="cannot copy the model's structure"):
        context.export_model()
    assert layout.read_manifest(open_storage(str(tmp_path / "model")))[0] is None


PROBE_TRAIN = """
import json, os, sys
import torch
sys.path.insert(0, {mlp!r})
import train as mlp


def train_loop(ctx):
    mlp.train_loop(ctx)
    # The sharded model's own answer, computed collectively by every rank.
    probe = torch.randn(5, 32, generator=torch.Generator().manual_seed(7))
    model = ctx._runner.model
    model.eval()
    with torch.no_grad():
        out = model(probe.to(ctx.device))
    if ctx.rank == 0:
        torch.save(out.float().cpu(), {out!r})
"""


@pytest.mark.parametrize(
    "strategy",
    [{"type": "fsdp"}, {"type": "deepspeed", "deepspeed": {"stage": 3}}],
    ids=["fsdp", "zero3"],
)
def test_two_ranks_export_what_the_sharded_model_computes(strategy: dict[str, Any], tmp_path: Path):
    out = tmp_path / "sharded-output.pt"
    (tmp_path / "probe_train.py").write_text(
        PROBE_TRAIN.format(mlp=str(EXAMPLES / "mlp"), out=str(out))
    )
    root = tmp_path / "model"
    spec = {
        **_spec(strategy["type"], steps=8),
        "entrypoint": {"function": "probe_train:train_loop", "args": {"steps": 8, "hidden": 32}},
        "resources": {"gpus": 2},
        "strategy": strategy,
    }
    env = {
        **os.environ,
        "TRAINPLANE_SPEC": json.dumps(spec),
        "TRAINPLANE_MODEL_URI": str(root),
        "TRAINPLANE_DEVICE": "cpu",
        "TORCH_EXTENSIONS_DIR": str(TORCH_EXTENSIONS_CACHE),
        "OMP_NUM_THREADS": "1",
    }
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "-m",
            "trainplane.runtime.local",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    manifest, loaded = _load(str(root), tmp_path)
    assert manifest.world_size == 2 and manifest.step == 8
    with torch.no_grad():
        assert torch.allclose(loaded(PROBE), torch.load(out), atol=1e-5)
