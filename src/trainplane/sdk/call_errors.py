"""Errors of calling a ``@trainplane.distributed`` function: the ones raised
before anything is queued (``ShippingError``), and the one that brings a
remote exception home (``RemoteFunctionError``)."""

from __future__ import annotations

from trainplane.sdk.errors import JobFailed
from trainplane.sdk.models import Job, JobResult


class ShippingError(ValueError):
    """The call cannot be shipped to the cluster; nothing was queued."""


class Unpicklable(ShippingError):
    """Something the call needs cannot be pickled; the message names it."""


class ModuleNotShippable(ShippingError):
    """A module of the caller's own is needed but cannot be shipped."""


class CallTooLarge(ShippingError):
    """The arguments (or the code) are too large to ship with a call."""


class RemoteFunctionError(JobFailed):
    """The function raised on the cluster. ``str()`` ends with the remote
    traceback; ``remote_type`` and ``remote_message`` are the exception's."""

    def __init__(self, job: Job, result: JobResult) -> None:
        error = result.error
        self.result = result
        self.remote_type = error.type if error else "Exception"
        self.remote_message = error.message if error else ""
        self.remote_traceback = error.traceback if error else ""
        super().__init__(job)
        self.args = (
            f"{self.remote_type}: {self.remote_message}\n"
            f"(raised on rank {result.rank} of job {job.id}, attempt {result.attempt}; "
            f"its status is {job.status})\n\nRemote traceback:\n{self.remote_traceback}",
        )
