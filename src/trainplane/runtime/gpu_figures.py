"""The GPU figures a job reports with its steps.

Each rank reads its own GPU's utilization and the memory in use on it from
NVML (nvidia-ml-py): the values now, not a peak since the start, and the
whole device's memory (the CUDA context, NCCL's buffers and the allocator's
cache included), which is what runs out. Rank 0 reports the max and the
mean over the ranks: ``gpu_utilization_max`` and ``gpu_utilization_mean``
(percent), ``gpu_memory_gb_max`` and ``gpu_memory_gb_mean`` (GiB).

Where NVML cannot be read (nvidia-ml-py missing, no driver library, a GPU it
does not list) the rank's figures are absent, never zero, and the rank says
why once in the job's log. Training never fails for want of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

UTILIZATION = "gpu_utilization"
MEMORY = "gpu_memory_gb"


@dataclass(frozen=True)
class Sample:
    utilization: float  # percent of the last sample period the GPU was busy
    memory_gb: float  # in use on the device, GiB


class NvmlReader:
    """Reads this rank's GPU (``device``) from NVML."""

    def __init__(self, device: torch.device, *, say: Callable[[str], None]) -> None:
        self.device = device
        self.say = say
        self.gave_up = False
        self._nvml: Any = None
        self._handle: Any = None

    def read(self) -> Sample | None:
        if self.gave_up:
            return None
        try:
            if self._handle is None:
                self._handle = self._open()
            utilization = self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
            memory = self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used
        except Exception as exc:  # monitoring must not fail the run; said once, below
            self.gave_up = True
            self.say(f"trainplane: no GPU figures from {self.device}: {_why(exc)}")
            return None
        return Sample(float(utilization), memory / 2**30)

    def _open(self) -> Any:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        self._nvml = pynvml
        # NVML numbers every GPU of the machine; CUDA only the visible ones,
        # in its own order. The UUID names the same GPU in both.
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        wanted = _bare_uuid(torch.cuda.get_device_properties(index).uuid)
        for n in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(n)
            if _bare_uuid(pynvml.nvmlDeviceGetUUID(handle)) == wanted:
                return handle
        raise LookupError(f"NVML lists no GPU with the UUID of {self.device} ({wanted})")


def _bare_uuid(value: Any) -> str:
    text = value.decode() if isinstance(value, bytes) else str(value)
    return text.lower().removeprefix("gpu-")


def _why(exc: Exception) -> str:
    if isinstance(exc, ImportError):
        return "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    return f"{type(exc).__name__}: {exc}"


def summarize(samples: Sequence[Sample | None]) -> dict[str, float]:
    """Max and mean over the ranks that have figures; nothing when none has."""
    present = [s for s in samples if s is not None]
    if not present:
        return {}
    utilization = [s.utilization for s in present]
    memory = [s.memory_gb for s in present]
    return {
        f"{UTILIZATION}_max": max(utilization),
        f"{UTILIZATION}_mean": sum(utilization) / len(utilization),
        f"{MEMORY}_max": max(memory),
        f"{MEMORY}_mean": sum(memory) / len(memory),
    }


def over_ranks(own: Sample | None, *, world_size: int, device: torch.device) -> dict[str, float]:
    """Every rank's sample gathered (a collective: call it on every rank),
    summarized. A rank without figures sends NaNs, which count as absent."""
    row = torch.tensor(
        [math.nan, math.nan] if own is None else [own.utilization, own.memory_gb],
        dtype=torch.float64,
        device=device,
    )
    rows = [row]
    if dist.is_initialized() and world_size > 1:
        rows = [torch.empty_like(row) for _ in range(world_size)]
        dist.all_gather(rows, row)
    samples = [None if math.isnan(u) else Sample(u, m) for u, m in (r.tolist() for r in rows)]
    return summarize(samples)


class GpuFigures:
    """What ``TrainContext.report`` adds: the ranks' GPU figures, on GPUs only."""

    def __init__(self, device: torch.device, *, world_size: int, rank: int) -> None:
        self.world_size = world_size
        self.device = device
        self.reader = (
            NvmlReader(device, say=lambda line: print(f"{line} (rank {rank})", flush=True))
            if device.type == "cuda"
            else None
        )

    def gather(self) -> dict[str, float]:
        """Collective on GPUs (every rank, at the same steps); nothing on CPUs."""
        if self.reader is None:
            return {}
        return over_ranks(self.reader.read(), world_size=self.world_size, device=self.device)
