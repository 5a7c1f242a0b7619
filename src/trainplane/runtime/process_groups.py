"""The process groups a rank joins, and how long their collectives may wait.

Two groups:

- the training group (the default one): NCCL for CUDA tensors, with gloo
  beside it for CPU tensors. FSDP2's CPU offload keeps gradients in host
  memory, and clipping them reduces their norms there: an NCCL-only group
  cannot do that. Its timeout is the job's ``stuck_after`` when set (the
  job's own word on how long no progress means a hang), else
  :data:`TRAINING_TIMEOUT`, above NCCL's 10 minutes, which a slow first step
  (a compile, a data loader warming up) can exceed.
- the bookkeeping group (gloo, CPU): the runtime's own collectives around
  checkpoints and the model export, where the other ranks wait while rank 0
  alone writes a manifest, uploads or exports a large model. Waiting on gloo
  keeps them out of NCCL's watchdog, and its timeout is the job's
  ``max_runtime`` when set, else :data:`BOOKKEEPING_TIMEOUT`: a real hang is
  caught by the control plane's ``stuck_after`` and a dead rank by its
  launcher, long before that.
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

from trainplane.jobs.spec import FinetuneSpec, TrainSpec

# Above NCCL's own 10 minutes: a first step that compiles, or one rank's
# evaluation, may keep the others waiting in a collective that long.
TRAINING_TIMEOUT = timedelta(minutes=30)
# Long enough for rank 0 to export and upload a model of hundreds of GB
# (280 GB at 100 MB/s is under an hour) while the other ranks wait.
BOOKKEEPING_TIMEOUT = timedelta(hours=6)

_bookkeeping: dist.ProcessGroup | None = None


def backend_for(device_type: str) -> str:
    """The training group's backend: on GPUs NCCL for CUDA tensors and gloo
    for CPU ones (offloaded gradients, clipping their norms); gloo on CPU."""
    return "cuda:nccl,cpu:gloo" if device_type == "cuda" else "gloo"


def training_timeout(spec: TrainSpec | FinetuneSpec | None) -> timedelta:
    """``spec`` None: a group made outside a job (a measurement, a test)."""
    seconds = spec.stuck_after_seconds if spec is not None else None
    return timedelta(seconds=seconds) if seconds else TRAINING_TIMEOUT


def bookkeeping_timeout(spec: TrainSpec | FinetuneSpec | None) -> timedelta:
    seconds = spec.max_runtime_seconds if spec is not None else None
    return timedelta(seconds=seconds) if seconds else BOOKKEEPING_TIMEOUT


def join(
    spec: TrainSpec | FinetuneSpec | None, *, device_type: str, rank: int, world_size: int
) -> None:
    """Make the training group (from the environment's rendezvous) and the
    bookkeeping group beside it. Collective: every rank calls it."""
    dist.init_process_group(
        backend_for(device_type),
        rank=rank,
        world_size=world_size,
        timeout=training_timeout(spec),
    )
    open_bookkeeping(spec)


def open_bookkeeping(spec: TrainSpec | FinetuneSpec | None) -> None:
    """The bookkeeping group over the default group's ranks. Collective."""
    global _bookkeeping
    _bookkeeping = dist.new_group(backend="gloo", timeout=bookkeeping_timeout(spec))


def bookkeeping_group() -> dist.ProcessGroup | None:
    """The group the runtime's bookkeeping collectives run on; None (the
    default group) when this process did not make one."""
    return _bookkeeping


def leave() -> None:
    """Destroy both groups (the bookkeeping one goes with the default)."""
    global _bookkeeping
    _bookkeeping = None
    dist.destroy_process_group()
