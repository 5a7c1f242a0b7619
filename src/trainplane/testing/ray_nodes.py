"""A second Ray node on this machine, joined to a :class:`LocalRayHead`, and
killing a node's processes all at once: the fault-injection tests lose nodes
as a cloud loses machines. Started and stopped by PID, never with ``ray stop``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from trainplane.backends.local_ray import (
    LocalRayError,
    LocalRayHead,
    node_options,
    spawn_ray,
)
from trainplane.net import free_port


class LocalRayWorkerNode:
    def __init__(self, head: LocalRayHead, *, slots: int, state_dir: Path) -> None:
        self.head = head
        self.slots = slots
        self.state_dir = state_dir
        self.log_path = state_dir / "ray-node.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def temp_dir(self) -> Path:
        # A folder of its own: a node sharing the head's would have both log
        # monitors forward the same worker logs (every line twice).
        return self.state_dir / "ray"

    def start(self, timeout: float = 90) -> LocalRayWorkerNode:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        command = [
            str(Path(sys.executable).parent / "ray"),
            "start",
            f"--address=127.0.0.1:{self.head.gcs_port}",
            "--block",
            # The head took Ray's default ports: this node takes free ones.
            f"--node-manager-port={free_port()}",
            f"--object-manager-port={free_port()}",
            *node_options(self.slots, self.temp_dir),
        ]
        known = self.alive_worker_nodes()
        self.process = spawn_ray(command, self.temp_dir, self.log_path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise LocalRayError(f"ray start exited with {self.process.returncode}:\n{tail}")
            if self.alive_worker_nodes() - known:
                return self
            time.sleep(0.5)
        self.kill()
        raise LocalRayError(f"the worker node did not join after {timeout:.0f}s")

    def alive_worker_nodes(self) -> set[str]:
        """Ids of the worker (non-head) nodes the head lists as alive. A killed
        node stays listed until the head's health checks give up on it."""
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
            answer = httpx.get(f"{self.head.address}/api/v0/nodes", timeout=5)
            nodes = answer.json()["data"]["result"]["result"]
            return {n["node_id"] for n in nodes if n["state"] == "ALIVE" and not n["is_head_node"]}
        return set()

    def kill(self) -> None:
        """SIGKILL to every process of the node, as if its machine were gone.
        Ray puts its workers in process groups of their own, so what marks
        the node's processes is their session, which ``ray start`` leads."""
        if self.process is None:
            return
        kill_session(self.process.pid)
        self.process.wait()
        self.process = None


def kill_session(session: int) -> None:
    """SIGKILL to every process of ``session`` on this machine."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getsid(int(entry.name)) == session:
                    os.kill(int(entry.name), signal.SIGKILL)
