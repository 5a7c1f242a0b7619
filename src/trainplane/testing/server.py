"""Real server processes on 127.0.0.1 for tests and benchmarks, each in a
process group of its own and stopped by PID: ``trainplane server``, and the
shape they share (``ServiceProcess``)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

import httpx

from trainplane.net import free_port


class ServiceProcess:
    """A command that serves HTTP, up once ``ready_path`` answers 200."""

    name = "service"
    ready_path = "/healthz"

    def __init__(
        self, env: dict[str, str], *, log_path: Path | None = None, port: int | None = None
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **env}
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 60) -> Self:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            self.command(),
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}")
            try:
                if httpx.get(f"{self.url}{self.ready_path}", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout}s")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        # Its own process group: its workers stop with it.
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def kill(self) -> None:
        """SIGKILL, as a crash would: nothing gets to clean up."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __enter__(self) -> Self:
        # A process started already (``with Server(...).start():``) is not
        # started twice: the second would find the port answering and stand in
        # for the first, which would then outlive the block.
        if self.process is not None and self.process.poll() is None:
            return self
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServerProcess(ServiceProcess):
    """``trainplane server``, ready when ``/readyz`` says so."""

    name = "trainplane server"
    ready_path = "/readyz"

    def __init__(
        self,
        env: dict[str, str],
        *,
        workers: int = 1,
        log_path: Path | None = None,
        log_level: str = "warning",
        args: tuple[str, ...] = (),
        port: int | None = None,
        own_token: bool = False,
    ):
        """``own_token``: the server's settings come only from ``env``, none
        inherited from the caller's ``TRAINPLANE_*`` variables, and it gets a
        bootstrap token of its own (sent by ``headers``). Benchmarks use
        this, so a caller's token or database never leaks into them."""
        if own_token:
            env = {**env, "TRAINPLANE_BOOTSTRAP_TOKEN": secrets.token_urlsafe(24)}
        super().__init__(env, log_path=log_path, port=port)
        if own_token:
            self.env = {
                key: value
                for key, value in self.env.items()
                if not key.startswith("TRAINPLANE_") or key in env
            }
        self.headers = (
            {"Authorization": f"Bearer {env['TRAINPLANE_BOOTSTRAP_TOKEN']}"} if own_token else {}
        )
        self.args = args
        self.log_level = log_level
        self.workers = workers

    def command(self) -> list[str]:
        return [
            str(Path(sys.executable).with_name("trainplane")),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
            "--log-level",
            self.log_level,
            *self.args,
        ]
