"""How each rank of a script learns that the control plane asked its attempt to
stop (a preemption), for ``trainplane.script.should_stop``.

Rank 0 hears it in the answer to its progress reports. When the script runs
a torch.distributed process group of more than one rank, rank 0's answer is
broadcast and nobody else asks (``should_stop`` is then collective). Without
one, each rank learns it on its own, and cheaply: the ranks of a node share a
stop file in the node's sync folder, written by whoever of them heard first.
Rank 0 writes it on its node; on every other node its local rank 0 polls the
progress endpoint with an empty report every :data:`POLL_SECONDS` (a
heartbeat, well inside the endpoint's rate limit), and the node's other ranks
only look at the file.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path

import httpx

from trainplane.runtime.reporting import retry_after, stop_reason_of

POLL_SECONDS = 5.0
STOP_FILE = "stop"  # in the node's sync folder: the reason, once asked


class StopWatch:
    """One per process. ``asked()`` is this process's own knowledge."""

    def __init__(
        self,
        *,
        rank: int,
        local_rank: int,
        sync_dir: Path | None,
        endpoint: str | None,
        token: str | None,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.rank = rank
        self.local_rank = local_rank
        self.stop_file = sync_dir / STOP_FILE if sync_dir is not None else None
        self.endpoint = endpoint
        self.token = token
        self.poll_seconds = poll_seconds
        self.reason: str | None = None
        self._poller: threading.Thread | None = None

    def heard(self, reason: str) -> None:
        """The stop was asked for (rank 0's reporter heard it): told to the node."""
        if self.reason is not None:
            return
        self.reason = reason
        if self.stop_file is not None:
            with contextlib.suppress(OSError):
                self.stop_file.parent.mkdir(parents=True, exist_ok=True)
                partial = self.stop_file.with_name(f".{STOP_FILE}.{os.getpid()}")
                partial.write_text(reason)
                os.replace(partial, self.stop_file)

    def asked(self) -> bool:
        if self.reason is not None:
            return True
        if self.stop_file is not None and self.stop_file.exists():
            with contextlib.suppress(OSError):
                self.reason = self.stop_file.read_text() or "stop"
            return self.reason is not None
        if self.rank != 0 and (self.local_rank == 0 or self.stop_file is None):
            self._start_polling()
        return False

    def _start_polling(self) -> None:
        if self._poller is None and self.endpoint is not None:
            self._poller = threading.Thread(
                target=self._poll, name="trainplane-stop-watch", daemon=True
            )
            self._poller.start()

    def _poll(self) -> None:
        assert self.endpoint is not None
        headers = {"Authorization": f"Bearer {self.token}"}
        pause = self.poll_seconds
        with httpx.Client(timeout=10.0, headers=headers) as client:
            while self.reason is None:
                try:
                    answer = client.post(self.endpoint, json={})
                except httpx.HTTPError:
                    answer = None
                if answer is not None and answer.status_code in (401, 409):
                    return  # the attempt is over, or the token no longer holds
                pause = self.poll_seconds
                if answer is not None and answer.status_code == 429:
                    pause = max(pause, retry_after(answer))
                if answer is not None and answer.status_code == 200:
                    reason = stop_reason_of(answer)
                    if reason is not None:
                        print(f"trainplane: the control plane asks this attempt to stop ({reason})")
                        self.heard(reason)
                        return
                time.sleep(pause)


def process_group_size() -> int:
    """The size of the script's torch.distributed world; 1 without one (torch
    is not imported here for a script that never did)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size()


def broadcast_flag(flag: bool) -> bool:
    """Rank 0's ``flag`` on every rank of the script's process group, on the
    device its backend works with. Collective."""
    import torch
    import torch.distributed as dist

    device = torch.device("cpu")
    if "nccl" in str(dist.get_backend()) and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    tensor = torch.tensor([int(flag)], dtype=torch.int32, device=device)
    dist.broadcast(tensor, src=0)
    return bool(tensor.item())
