"""Wakes the scheduler of this process early when there is new work.

Services set it after their transaction commits (a submission, a cancel), so a
scheduler in the same process reacts at once instead of at its next tick.
Schedulers in other processes still find the work on their next tick.
"""

from __future__ import annotations

import threading

_work = threading.Event()


def work_available() -> None:
    _work.set()


def wait_for_work(timeout: float) -> bool:
    """Sleep until work is announced or ``timeout`` passes; True if announced."""
    announced = _work.wait(timeout)
    _work.clear()
    return announced
