"""Child processes that die with their parent.

A Ray worker killed with SIGKILL (job stopped, node lost) cannot clean up; on
Linux the kernel delivers SIGKILL to a child that asked for it when its parent
dies, so user processes never outlive the attempt that started them.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
EXIT_ORPHANED = 70  # EX_SOFTWARE


def die_with_parent() -> None:
    """For ``subprocess.Popen(preexec_fn=...)``: runs in the child before exec."""
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def forward_output(process: subprocess.Popen[bytes], *, rank: int) -> None:
    """Copy the child's output to ours, line by line, tagged with its rank."""
    assert process.stdout is not None
    for raw in process.stdout:
        sys.stdout.write(f"[rank {rank}] {raw.decode(errors='replace')}")
        sys.stdout.flush()


class OrphanWatch:
    """Ends this process if its parent dies (e.g. the Ray head holding its job
    supervisor was killed): an attempt's driver must not train on, unseen, on a
    cluster trainplane considers lost. Polling, because PR_SET_PDEATHSIG on
    ourselves would fire when the parent *thread* that started us exits.

    ``parent`` is the pid the parent must have, as the entrypoint passed it
    (:data:`~trainplane.runtime.env.SUPERVISOR_PID`). Sampling our parent at
    start instead misses the race this guards against: a stop that reaches
    the supervisor while Python is still importing leaves us already
    reparented, and the watch would then guard the wrong parent forever.

    ``cleanups`` run, each for at most ``cleanup_seconds``, before the exit:
    they free what we hold on the cluster (a gang's actors and placement
    group) instead of leaving that to Ray's owner-death handling."""

    def __init__(
        self, parent: int, *, poll_seconds: float = 1.0, cleanup_seconds: float = 5.0
    ) -> None:
        self.parent = parent
        self.poll_seconds = poll_seconds
        self.cleanup_seconds = cleanup_seconds
        self._cleanups: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def add_cleanup(self, cleanup: Callable[[], None]) -> None:
        with self._lock:
            self._cleanups.append(cleanup)

    def orphaned(self) -> bool:
        return os.getppid() != self.parent

    def start(self) -> OrphanWatch:
        threading.Thread(target=self._watch, name="trainplane-orphan-watch", daemon=True).start()
        return self

    def _watch(self) -> None:
        while not self.orphaned():
            time.sleep(self.poll_seconds)
        # Our output may be a pipe whose reader died with the parent: saying
        # why must not be what stops us from leaving.
        with contextlib.suppress(OSError, ValueError):
            print("trainplane: the job's supervisor is gone; stopping", flush=True)
        with self._lock:
            cleanups = list(self._cleanups)
        for cleanup in cleanups:
            # A cleanup talks to the cluster, which may be the thing that is
            # gone: it gets a bounded time, then we leave anyway.
            worker = threading.Thread(target=_quietly, args=(cleanup,), daemon=True)
            worker.start()
            worker.join(self.cleanup_seconds)
        os._exit(EXIT_ORPHANED)  # children asked for SIGKILL when we die (die_with_parent)


def _quietly(cleanup: Callable[[], None]) -> None:
    try:
        cleanup()
    except Exception as exc:  # the process is leaving; say why it could not tidy up
        with contextlib.suppress(OSError, ValueError):
            print(f"trainplane: cleanup before exit failed: {exc}", flush=True)
