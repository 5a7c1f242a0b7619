"""One rank of tests/runtime/test_two_ranks.py, run under torchrun with 2
ranks (gloo); it writes what it saw to ``<out>/rank-<n>.json``.

First it trains one model three ways:

- ``meta``: FSDP2, the model built with its weights on rank 0 and on the
  meta device elsewhere; the peak of resident memory while it is prepared;
- ``copies``: FSDP2, every rank building a full copy, rank 1 with another
  seed (the shards come from rank 0 all the same);
- ``ddp``: DDP over full copies built alike, the reference.

Then the fine-tune recipe builds and trains a LoRA model on a tiny Llama
(``finetune``: see finetune_two_ranks.py).

Then ten reports go through runtime.step_sync (``step_sync``).

Then the training group's timeout is cut to a second, and rank 1 waits
longer than that in each bookkeeping collective while rank 0 is busy:
``bookkeeping`` is what those returned (a timeout raises).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import finetune_two_ranks  # this script's sibling: its folder is on sys.path
import torch
import torch.distributed as dist

from trainplane.jobs.spec import Strategy
from trainplane.runtime import collective, process_groups
from trainplane.runtime.step_sync import StepSync
from trainplane.runtime.strategies import StrategySettings, make_runner
from trainplane.testing.memory_probe import (
    _peak_resident_bytes,
    _reset_peak_resident,
    _resident_bytes,
)

WIDTH, DEPTH, STEPS = 1024, 12, 2
# Longer than the second the training group waits in the second phase.
BUSY_SECONDS = 2


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(DEPTH))
        self.head = torch.nn.Linear(WIDTH, 4)
        # Non-persistent: in no state dict, so it must come from rank 0 too.
        self.register_buffer("scale", torch.full((WIDTH,), 0.5), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * self.scale
        for block in self.blocks:
            x = torch.tanh(block(x)) + x
        return self.head(x)


def build(seed: int, *, on_meta: bool) -> Net:
    torch.manual_seed(seed)
    if on_meta:
        with torch.device("meta"):
            return Net()
    return Net()


def train(strategy: str, model: Net, rank: int) -> tuple[dict[str, list[float]] | None, int]:
    settings = StrategySettings(
        strategy=Strategy(type=strategy),
        precision="fp32",
        device=torch.device("cpu"),
        rank=rank,
        local_rank=rank,
        world_size=dist.get_world_size(),
    )
    runner = make_runner(settings)
    before = _resident_bytes()
    _reset_peak_resident()
    wrapped, _ = runner.prepare(model, lambda p: torch.optim.SGD(p, lr=0.1))
    prepare_peak = _peak_resident_bytes() - before
    data = torch.Generator().manual_seed(100 + rank)
    for _ in range(STEPS):
        x = torch.randn(8, WIDTH, generator=data)
        loss = wrapped(x).square().mean()
        runner.backward(loss, boundary=True)
        runner.step()
    state = runner.full_state_dict()
    summary = (
        {k: [float(v.double().sum()), float(v.double().abs().max())] for k, v in state.items()}
        if state
        else None
    )
    return summary, prepare_peak


def main(out: Path) -> None:
    rank = int(os.environ["RANK"])
    process_groups.join(None, device_type="cpu", rank=rank, world_size=2)
    model_bytes = sum(p.numel() * 4 for p in build(0, on_meta=True).parameters())
    record: dict[str, object] = {"model_bytes": model_bytes}
    # The copies first: what FSDP2 sets up once per process (imports,
    # caches) is then not counted in the measured run.
    record["copies"], _ = train("fsdp", build(rank, on_meta=False), rank)
    gc.collect()
    record["meta"], record["meta_prepare_peak"] = train("fsdp", build(0, on_meta=rank != 0), rank)
    record["ddp"], _ = train("ddp", build(0, on_meta=False), rank)
    record["finetune"] = finetune_two_ranks.run(out / "finetune", rank)
    record["step_sync"] = meet_in_batches(rank)
    record["bookkeeping"] = wait_for_rank_0(rank)
    (out / f"rank-{rank}.json").write_text(json.dumps(record))
    process_groups.leave()


def meet_in_batches(rank: int) -> list[object]:
    """Ten reports through runtime.step_sync, the ranks meeting rarely (an hour
    apart by pace, so only at the first steps and a decision step): each
    meeting's step, the points it gathered, rank 0's stop and clock as
    shared; then what the last gather (at the end of a run) hands over."""
    sync = StepSync(world_size=2, device=torch.device("cpu"), decision_steps=[7], meet_seconds=3600)
    seen: list[object] = []
    for step in range(1, 11):
        sync.add(step, {"own": float(rank)}, {"loss": torch.tensor(float(rank + step))}, {})
        if sync.meets_at(step):
            points = [(p.step, p.values) for p in sync.gather()]
            stop = "pruned" if rank == 0 and step == 7 else None
            meeting = sync.meet(step, stop=stop, time_due=rank == 0)
            seen.append([step, points, meeting.stop, meeting.time_due])
    seen.append(["end", [(p.step, p.values) for p in sync.gather()], None, False])
    return seen


def wait_for_rank_0(rank: int) -> list[object]:
    dist.barrier()
    # Cut once connected: a gloo group also connects within its timeout.
    dist.distributed_c10d._set_pg_timeout(timedelta(seconds=1))
    seen: list[object] = []
    for call in (collective.barrier, collective.broadcast, collective.gather):
        if rank == 0:
            time.sleep(BUSY_SECONDS)  # exporting, say, while rank 1 waits
        seen.append(call() if call is collective.barrier else call(f"from {rank}"))
    return seen


if __name__ == "__main__":
    main(Path(sys.argv[1]))
