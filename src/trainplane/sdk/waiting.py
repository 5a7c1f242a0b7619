"""The decisions of ``wait()``, shared by both clients: when a job has
changed enough to report, and how long to sleep before looking again."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypedDict

from trainplane.sdk.errors import WaitTimeout
from trainplane.sdk.models import Job


class WaitOptions(TypedDict, total=False):
    timeout: float | None  # seconds; default: wait as long as it takes
    poll_interval: float  # seconds between looks; default 1
    on_progress: Callable[[Job], Any]  # called with the job on each change


class Waiter:
    def __init__(self, options: WaitOptions) -> None:
        self.timeout = timeout = options.get("timeout")
        self.poll_interval = options.get("poll_interval", 1.0)
        self.on_progress = options.get("on_progress")
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._seen: tuple[object, ...] | None = None

    def report(self, job: Job) -> Any:
        """Call ``on_progress`` if the status, reason or step differ from the
        last job seen; returns what it returned (a coroutine, for AsyncClient)."""
        step = job.progress.step if job.progress else None
        seen = (job.status, job.reason, step)
        changed, self._seen = seen != self._seen, seen
        return self.on_progress(job) if changed and self.on_progress is not None else None

    def pause(self, job: Job) -> float:
        """Seconds to sleep before the next look; WaitTimeout once time is up."""
        if self._deadline is None or self.timeout is None:
            return self.poll_interval
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(job, self.timeout)
        return min(self.poll_interval, left)
