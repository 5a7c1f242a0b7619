"""Child processes that die with their parent.

A Ray worker killed with SIGKILL (job stopped, node lost) cannot clean up; on
Linux the kernel delivers SIGKILL to a child that asked for it when its parent
dies, so user processes never outlive the attempt that started them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time

_PR_SET_PDEATHSIG = 1


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


def exit_when_orphaned(poll_seconds: float = 1.0) -> None:
    """End this process if its parent dies (e.g. the Ray head holding its job
    supervisor was killed): an attempt's driver must not train on, unseen, on a
    cluster trainplane considers lost. Polling, because PR_SET_PDEATHSIG on
    ourselves would fire when the parent *thread* that started us exits."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        print("trainplane: the job's supervisor is gone; stopping", flush=True)
        os._exit(70)  # children asked for SIGKILL when we die (die_with_parent)

    threading.Thread(target=watch, name="trainplane-orphan-watch", daemon=True).start()
