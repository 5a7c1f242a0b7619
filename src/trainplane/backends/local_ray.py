"""The embedded Ray cluster of ``trainplane up``: a single-node Ray head that
trainplane starts, watches and stops by PID.

The head runs ``ray start --head --block`` from this virtual environment, with
the environment's ``bin`` first on PATH so job entrypoints find the same python
(and trainplane). It is tied to its parent: if trainplane dies, the kernel kills
``ray start``, whose reaper then takes the rest of Ray down with it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from trainplane.net import free_port
from trainplane.runtime.processes import die_with_parent


class LocalRayError(RuntimeError):
    pass


class LocalRayHead:
    def __init__(
        self, state_dir: Path, *, slots: int, gpus: int = 0, log_path: Path | None = None
    ) -> None:
        self.state_dir = state_dir
        self.slots = slots
        self.gpus = gpus
        self.gcs_port = free_port()
        self.dashboard_port = free_port()
        self.log_path = log_path or state_dir / "ray-head.log"
        self.pid_file = state_dir / "ray-head.pid"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def temp_dir(self) -> Path:
        # Ray puts unix sockets under its temp dir; their paths must stay short.
        return self.state_dir / "ray"

    def start(self, timeout: float = 120) -> LocalRayHead:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._stop_leftover()
        bindir = Path(sys.executable).parent
        command = [
            str(bindir / "ray"),
            "start",
            "--head",
            "--block",
            f"--port={self.gcs_port}",
            f"--dashboard-port={self.dashboard_port}",
            "--dashboard-host=127.0.0.1",
            f"--ray-client-server-port={free_port()}",
            *node_options(self.slots, self.temp_dir, gpus=self.gpus),
        ]
        self.process = spawn_ray(command, self.temp_dir, self.log_path)
        self.pid_file.write_text(str(self.process.pid))
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise LocalRayError(
                    f"ray start exited with {self.process.returncode}; see {self.log_path}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.address}/api/version", timeout=2).status_code == 200:
                    return
            time.sleep(0.3)
        self.stop()
        raise LocalRayError(f"the local Ray head was not ready after {timeout:.0f}s")

    def _stop_leftover(self) -> None:
        """A head left behind by a trainplane that was killed: stop it by its PID."""
        try:
            pid = int(self.pid_file.read_text())
        except (OSError, ValueError):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
            _wait_gone(pid, 15)
            os.killpg(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)

    def stop(self, grace: float = 2) -> None:
        """SIGTERM to the whole process group, then SIGKILL to what is left: a
        graceful Ray shutdown takes 15 s and more, and this head keeps nothing
        worth saving."""
        if self.process is None:
            return
        group = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        self.process.wait()
        _wait_gone(group, grace)
        self.pid_file.unlink(missing_ok=True)
        self.process = None

    def __enter__(self) -> LocalRayHead:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn_ray(command: list[str], temp_dir: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """``ray start ... --block`` as the leader of a session of its own (so all
    of that node's processes can be found and stopped) that dies with us."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            command,
            env=ray_environment(temp_dir),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )


def ray_environment(temp_dir: Path) -> dict[str, str]:
    """The environment ``ray start`` runs in, head or not."""
    bindir = Path(sys.executable).parent
    return {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        "RAY_TMPDIR": str(temp_dir),
        "RAY_USAGE_STATS_ENABLED": "0",
        # The dashboard agent samples every process's stats for Ray's own
        # dashboard every 5 s, which costs a small machine's training
        # processes CPU time; trainplane reports progress itself.
        "REPORTER_UPDATE_INTERVAL_MS": "60000",
        # Ray starts its workers at niceness 15, and the ranks they start
        # inherit it: on a machine whose CPUs also run the control plane, a
        # training step then waits whenever the server, raylet or GCS wakes.
        # Training is what this cluster is for.
        "RAY_worker_niceness": "0",
    }


def node_options(slots: int, temp_dir: Path, *, gpus: int = 0) -> list[str]:
    """``ray start`` options every node on this machine takes, head or not.
    ``gpus``: the GPUs this node offers; stated, never left to Ray's own
    detection, so that the node holds what trainplane registered (a head
    declaring GPUs the machine lacks hands out CUDA_VISIBLE_DEVICES all the
    same, which tests use)."""
    return [
        "--node-ip-address=127.0.0.1",
        # Ray's fixed default ports would clash with any other Ray on this
        # machine (another `up`, a test cluster, another node): take free ones.
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--num-cpus={slots}",
        f"--num-gpus={gpus}",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
    ]


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
