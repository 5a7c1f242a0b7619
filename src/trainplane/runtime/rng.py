"""Every random number generator a training step may draw from, saved per rank
so a resumed run draws what an uninterrupted one would have."""

from __future__ import annotations

import random
from typing import Any

import torch


def capture() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy

        state["numpy"] = numpy.random.get_state()
    except ImportError:
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy

        numpy.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
