"""Resuming reads a checkpoint without unpickling code (runtime.safe_loading):
a checkpoint file holding a pickle whose ``__reduce__`` would run something
is refused on resume, and what it would have run never runs, for each
strategy's files; a clean resume calls no unpickling loader at all; and a
save whose ``ctx.state`` could not load back safely is refused at save time.
In this process, a world of one (as tests/runtime/test_checkpointing.py)."""

from __future__ import annotations

import builtins
import json
import pickle
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy
import pytest
import torch

from tests.runtime.test_checkpointing import run
from trainplane.jobs.spec import parse_spec
from trainplane.runtime.context import TrainContext
from trainplane.runtime.safe_loading import UnsafeCheckpoint
from trainplane.storage.backends import StorageError

pytestmark = [pytest.mark.ray_free, pytest.mark.usefixtures("one_rank_group")]

POLICY = {"every_steps": 5, "keep_last": 5}


class Planted:
    """Unpickling it creates ``marker``: what a hostile checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str, str]]:
        return builtins.open, (str(self.marker), "w")


def _forget_deepspeeds_groups() -> None:
    """DeepSpeed keeps the process group it first saw in module globals; each
    test here has a process group of its own (one_rank_group)."""
    comm = sys.modules.get("deepspeed.comm.comm")
    groups = sys.modules.get("deepspeed.utils.groups")
    if comm is not None:
        comm.cdb = None
    if groups is not None:
        groups._WORLD_GROUP = None


@pytest.fixture(autouse=True)
def _no_deepspeed_leftovers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # DeepSpeed sets these for itself; they must not leak into later tests.
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "DS_ACCELERATOR"):
        monkeypatch.delenv(name, raising=False)
    _forget_deepspeeds_groups()
    yield
    _forget_deepspeeds_groups()


def plant(step_folder: Path, relative: str, marker: Path, *, plain_pickle: bool = False) -> None:
    """Replace one file of a complete checkpoint with a hostile pickle, and
    its manifest entry with the new size, as a job could."""
    target = step_folder / relative
    if plain_pickle:
        target.write_bytes(pickle.dumps(Planted(marker)))
    else:
        torch.save({"state": Planted(marker)}, target)
    manifest = json.loads((step_folder / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["path"] == relative:
            entry["size"] = target.stat().st_size
    (step_folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("strategy", "relative"),
    [
        ("ddp", "trainer/state.pt"),
        ("ddp", "trainer/rng-rank-0.pt"),
        ("ddp", "model.pt"),
        ("ddp", "optimizer.pt"),
        ("fsdp", "dcp/.metadata"),
        ("deepspeed", "deepspeed/mp_rank_00_model_states.pt"),
        ("deepspeed", "deepspeed/zero_pp_rank_0_mp_rank_00_optim_states.pt"),
    ],
)
def test_a_planted_pickle_is_refused_on_resume_and_never_runs(
    tmp_path: Path, strategy: str, relative: str
) -> None:
    root = tmp_path / "alpha" / "job" / "checkpoints"
    run(str(root), tmp_path, steps=5, checkpoint=POLICY, strategy=strategy, name="first")
    marker = tmp_path / "planted-code-ran"
    plant(root / "step-5", relative, marker, plain_pickle=relative.endswith(".metadata"))
    with pytest.raises(UnsafeCheckpoint, match="refusing"):
        run(str(root), tmp_path, steps=10, checkpoint=POLICY, strategy=strategy, name="again")
    assert not marker.exists()


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "deepspeed"])
def test_a_clean_resume_never_unpickles_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    root = str(tmp_path / "ckpt")
    run(root, tmp_path, steps=5, checkpoint=POLICY, strategy=strategy, name="first")
    unsafe: list[str] = []
    torch_load, pickle_load = torch.load, pickle.load

    def spying_torch_load(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("weights_only", True):
            unsafe.append(f"torch.load({args[0]!r}, weights_only=False)")
        return torch_load(*args, **kwargs)

    def spying_pickle_load(*args: Any, **kwargs: Any) -> Any:
        unsafe.append("pickle.load")
        return pickle_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spying_torch_load)
    monkeypatch.setattr(pickle, "load", spying_pickle_load)
    _, context = run(root, tmp_path, steps=10, checkpoint=POLICY, strategy=strategy, name="b")
    assert context.resumed_from is not None and context.resumed_from.endswith("/step-5")
    assert unsafe == []


def _context(root: Path) -> TrainContext:
    spec = parse_spec(
        {"kind": "train", "name": "r", "entrypoint": {"function": "x:y"}, "checkpoint": POLICY}
    )
    return TrainContext(
        spec,
        rank=0,
        local_rank=0,
        world_size=1,
        device=torch.device("cpu"),
        checkpoint_root=str(root),
    )


def _prepared(root: Path) -> TrainContext:
    context = _context(root)
    model = torch.nn.Linear(2, 2)
    context.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    return context


def test_ctx_state_that_would_need_unpickling_is_refused_at_save_time(tmp_path: Path) -> None:
    context = _prepared(tmp_path / "ckpt")
    context.state["callback"] = Planted(tmp_path / "marker")
    with pytest.raises(StorageError, match=r"ctx\.state.*Keep numbers, strings"):
        context.checkpoint(step=1)
    assert not (tmp_path / "marker").exists()
    assert not list((tmp_path / "ckpt").glob("step-1/manifest.json"))


def test_ctx_state_of_plain_and_numpy_values_round_trips(tmp_path: Path) -> None:
    context = _prepared(tmp_path / "ckpt")
    kept = {
        "best": numpy.float64(0.25),
        "seen": numpy.arange(4),
        "history": [1.0, 2.0],
        "name": "x",
        "weights": torch.ones(2),
    }
    context.state.update(kept)
    context.checkpoint(step=1)
    resumed = _prepared(tmp_path / "ckpt")
    assert resumed.restore() == 1
    assert resumed.state["best"] == 0.25 and resumed.state["name"] == "x"
    assert resumed.state["seen"].tolist() == [0, 1, 2, 3]
    assert resumed.state["history"] == [1.0, 2.0]
    assert torch.equal(resumed.state["weights"], torch.ones(2))
