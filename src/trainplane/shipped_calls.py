"""A function call shipped by value: what ``@trainplane.distributed`` puts in a
job's code bundle and the runtime calls on every rank.

The job is an ordinary function job: its entrypoint is ``SHIPPED_FUNCTION``,
which loads ``PAYLOAD_PATH`` from the job's working folder (the bundle) and
calls the function in it with the rank's TrainContext. The payload is a plain
pickle of a small envelope (the Python version that made it, the function's
name) around the cloudpickle of ``(function, args, kwargs)``, so that a
version mismatch is named before any of the user's code is unpickled.
"""

from __future__ import annotations

import pickle
import platform
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SHIPPED_FUNCTION = "trainplane.runtime.shipped:call"
PAYLOAD_PATH = ".trainplane/call.pkl"
FORMAT = 1


class ShippedCallError(RuntimeError):
    """The payload cannot be loaded here; the message says why."""


@dataclass(frozen=True)
class ShippedCall:
    function: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    name: str


def python_version() -> str:
    return ".".join(platform.python_version_tuple()[:2])


def pack_call(call_pickle: bytes, name: str) -> bytes:
    """The payload around ``call_pickle``, a cloudpickle of (function, args, kwargs)."""
    envelope = {"format": FORMAT, "python": python_version(), "name": name, "call": call_pickle}
    return pickle.dumps(envelope, protocol=pickle.HIGHEST_PROTOCOL)


def unpack_call(data: bytes) -> ShippedCall:
    try:
        envelope = pickle.loads(data)
        made_with, name, call = envelope["python"], envelope["name"], envelope["call"]
    except Exception as exc:
        raise ShippedCallError(f"the shipped call is unreadable ({exc})") from None
    if made_with != python_version():
        raise ShippedCallError(
            f"{name} was pickled by Python {made_with}, and the cluster runs Python "
            f"{python_version()}: functions ship by value only between equal versions; "
            f"call it from Python {python_version()}"
        )
    try:
        function, args, kwargs = pickle.loads(call)
    except Exception as exc:
        raise ShippedCallError(
            f"{name} cannot be unpickled on the cluster: {type(exc).__name__}: {exc}"
        ) from exc
    return ShippedCall(function=function, args=tuple(args), kwargs=dict(kwargs), name=name)
