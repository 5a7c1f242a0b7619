"""This machine's NVIDIA GPUs, as ``trainplane up`` registers them.

Found through NVML, which comes with the NVIDIA driver. Its Python binding
(nvidia-ml-py, imported as ``pynvml``) is imported only when asked: without
it, or without a driver, the machine has no GPUs as far as trainplane goes,
and ``up`` registers a cpu cluster as before.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# Words of NVML's product names that say nothing about the model.
_VENDOR_WORDS = {"NVIDIA", "TESLA", "GEFORCE", "QUADRO"}


@dataclass(frozen=True)
class DetectedGpu:
    index: int  # NVML's, the number CUDA_VISIBLE_DEVICES uses
    uuid: str
    name: str  # as NVML says it, e.g. "NVIDIA H100 80GB HBM3"
    memory_bytes: int


def detect_gpus(environ: Mapping[str, str] | None = None) -> list[DetectedGpu]:
    """The GPUs NVML sees that this process may use (``CUDA_VISIBLE_DEVICES``
    narrows them, as it does for Ray); none without NVML or a driver."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        found = [_describe(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError as exc:
        log.warning("NVML could not describe this machine's GPUs (%s): using none", exc)
        return []
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return visible_gpus(found, os.environ if environ is None else environ)


def _describe(pynvml: Any, index: int) -> DetectedGpu:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    return DetectedGpu(
        index=index,
        uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
        name=_text(pynvml.nvmlDeviceGetName(handle)),
        memory_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
    )


def _text(value: str | bytes) -> str:
    # Older bindings answer bytes.
    return value.decode() if isinstance(value, bytes) else value


def visible_gpus(gpus: Sequence[DetectedGpu], environ: Mapping[str, str]) -> list[DetectedGpu]:
    """``gpus`` narrowed to ``CUDA_VISIBLE_DEVICES`` (indexes or UUIDs) when set."""
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return list(gpus)
    wanted = [item.strip() for item in listed.split(",") if item.strip()]
    return [g for g in gpus if str(g.index) in wanted or g.uuid in wanted]


def accelerator_type(name: str) -> str:
    """The short type jobs ask for in ``resources.gpu_type``: "NVIDIA H100 80GB
    HBM3" -> "H100", "NVIDIA A100-SXM4-80GB" -> "A100", "NVIDIA GeForce RTX
    4090" -> "RTX4090"."""
    words = [w for w in re.split(r"\s+", name.strip()) if w.upper() not in _VENDOR_WORDS]
    for position, word in enumerate(words):
        if any(c.isdigit() for c in word):
            model = word.split("-")[0]
            if model.isdigit() and position > 0:
                model = words[position - 1] + model  # "RTX 4090": the series names it
            cleaned = re.sub(r"[^A-Za-z0-9._-]", "", model)[:32]
            if cleaned:
                return cleaned
    return re.sub(r"[^A-Za-z0-9._-]", "", "".join(words))[:32] or "gpu"


def local_cluster_fields(
    name: str, address: str, *, slots: int, gpus: Sequence[DetectedGpu]
) -> dict[str, Any]:
    """What ``up`` registers its local cluster as: the machine's GPUs, their
    type and memory; without GPUs, ``slots`` CPU worker slots."""
    fields: dict[str, Any] = {
        "name": name,
        "address": address,
        "price_per_gpu_hour": 0.0,
        "labels": {"managed-by": "trainplane-up"},
    }
    if not gpus:
        return fields | {
            "accelerator": "cpu",
            "gpus": slots,
            "gpus_per_node": slots,
            "gpu_memory_gb": None,
        }
    types = [accelerator_type(g.name) for g in gpus]
    if len(set(types)) > 1:
        log.warning(
            "this machine has GPUs of several types (%s): registered as %s, with the "
            "smallest one's memory",
            ", ".join(sorted(set(types))),
            types[0],
        )
    # Decimal GB, as the memory estimates count; rounded down so that a job
    # that fits the registered memory fits the GPU.
    memory_gb = math.floor(min(g.memory_bytes for g in gpus) / 1e8) / 10
    return fields | {
        "accelerator": types[0],
        "gpus": len(gpus),
        "gpus_per_node": len(gpus),
        "gpu_memory_gb": memory_gb,
    }
