"""Reporting what a train function did to the control plane: rank 0's return
value, or a rank's exception with its traceback (``PUT .../result``).

Sent synchronously, before the rank exits: the attempt cannot end (and the
job cannot be SUCCEEDED) before its result is recorded. For a call shipped
by ``@trainplane.distributed`` the return value is the point of the job, so
failing to deliver it fails the rank; for other function jobs it is a
courtesy, and a failure to deliver is only printed.

The value is read where the job was submitted from, often a machine without
a GPU: every tensor in it is pickled as a detached CPU copy (see
:func:`host_pickle`), so a CUDA tensor anywhere in it (a dict of metrics, a
dataclass, a module's weights) unpickles there.
"""

from __future__ import annotations

import base64
import io
import os
import reprlib
import time
import traceback
from typing import Any

import cloudpickle
import httpx
import torch

from trainplane.jobs.results import MAX_REPR_CHARS, MAX_RESULT_BYTES, MAX_TRACEBACK_CHARS
from trainplane.runtime import env as tp_env

TRIES = 4
TIMEOUT_SECONDS = 30.0
BACKOFF_SECONDS = 1.0  # doubled after each failed try: 1 + 2 + 4 s in all


class ResultNotDelivered(RuntimeError):
    """The return value could not be recorded; the message says why."""


class ResultSender:
    def __init__(self, *, required: bool) -> None:
        url = os.environ.get(tp_env.CONTROL_PLANE_URL)
        job, attempt = os.environ.get(tp_env.JOB_ID), os.environ.get(tp_env.ATTEMPT_ID)
        token = os.environ.get(tp_env.ATTEMPT_TOKEN)
        self.endpoint = (
            f"{url.rstrip('/')}/v1/jobs/{job}/attempts/{attempt}/result"
            if url and job and attempt and token
            else None
        )
        self.headers = {"Authorization": f"Bearer {token}"}
        self.required = required

    def returned(self, rank: int, value: Any) -> None:
        try:
            data = host_pickle(value)
        except Exception as exc:
            self._undelivered(f"the return value ({type(value).__name__}) cannot be pickled: {exc}")
            return
        if len(data) > MAX_RESULT_BYTES:
            self._undelivered(
                f"the return value pickles to {len(data) / 2**20:.1f} MiB, over the "
                f"{MAX_RESULT_BYTES >> 20} MiB a result may be: write it to storage "
                "(ctx.model_dir, s3://...) and return its location"
            )
            return
        self._send(
            {
                "outcome": "returned",
                "rank": rank,
                "value": base64.b64encode(data).decode(),
                "value_repr": _short_repr(value),
            }
        )

    def raised(self, rank: int, exc: BaseException) -> None:
        """Best effort, whatever ``required`` says: the exception is what fails the rank."""
        text = "".join(traceback.format_exception(exc))
        report = {
            "outcome": "raised",
            "rank": rank,
            "error": {
                "type": type(exc).__qualname__[:255],
                "message": str(exc)[:MAX_TRACEBACK_CHARS],
                "traceback": text[-MAX_TRACEBACK_CHARS:],
            },
        }
        try:
            self._send(report)
        except ResultNotDelivered as problem:
            print(f"trainplane: {problem}", flush=True)

    def _send(self, report: dict[str, Any]) -> None:
        if self.endpoint is None:
            if self.required:
                raise ResultNotDelivered("there is no control plane to report the result to")
            return None  # a run without a control plane (torchrun, a test): nothing to tell
        last = ""
        for attempt in range(TRIES):
            try:
                response = httpx.put(
                    self.endpoint, json=report, headers=self.headers, timeout=TIMEOUT_SECONDS
                )
            except httpx.TransportError as exc:
                last = f"the control plane did not answer ({exc})"
            else:
                if response.is_success:
                    return None
                last = f"the control plane answered {response.status_code}: {response.text[:300]}"
                if response.status_code < 500:
                    break  # refused; asking again gets the same answer
            if attempt + 1 < TRIES:
                time.sleep(BACKOFF_SECONDS * 2**attempt)
        return self._undelivered(f"the result was not recorded: {last}")

    def _undelivered(self, why: str) -> None:
        if self.required:
            raise ResultNotDelivered(why)
        print(f"trainplane: {why}", flush=True)


class _HostPickler(cloudpickle.Pickler):
    """cloudpickle, with each tensor saved as a detached CPU copy of itself.

    Done while pickling rather than by rebuilding the value: it reaches
    tensors inside any object (containers, dataclasses, modules, the user's
    own classes), leaves the value itself untouched, and a tensor referenced
    twice is still one tensor when unpickled."""

    def __init__(self, file: io.BytesIO, protocol: int) -> None:
        super().__init__(file, protocol=protocol)
        self._protocol = protocol

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.nn.Parameter):
            # Still a Parameter, so a returned module keeps its parameters.
            host = torch.nn.Parameter(obj.detach().cpu(), requires_grad=obj.requires_grad)
            return host.__reduce_ex__(self._protocol)
        if isinstance(obj, torch.Tensor):
            return obj.detach().cpu().__reduce_ex__(self._protocol)
        return super().reducer_override(obj)


def host_pickle(value: Any) -> bytes:
    """The cloudpickle of ``value`` with every tensor in it on the CPU and
    detached from autograd: a CUDA tensor pickles with its device, and would
    not unpickle on a machine without one."""
    buffer = io.BytesIO()
    _HostPickler(buffer, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(value)
    return buffer.getvalue()


def _short_repr(value: Any) -> str:
    shortener = reprlib.Repr()
    shortener.maxstring = shortener.maxother = 200
    try:
        return shortener.repr(value)[:MAX_REPR_CHARS]
    except Exception:
        return f"<{type(value).__name__}>"
