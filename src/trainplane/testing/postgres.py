"""A throwaway PostgreSQL cluster in a temporary folder, listening on 127.0.0.1.

``initdb`` refuses to run as root, so when we are root the cluster is created and
run as the ``postgres`` system user (Debian's packages create it).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from trainplane.net import free_port


class PostgresNotAvailable(RuntimeError):
    pass


class PostgresDidNotStart(RuntimeError):
    """``pg_ctl start`` failed; the message carries its output and the server log's end."""


# Starting on a fresh port again covers a port taken between free_port() and
# the server's bind; the warning and the final error say what went wrong.
START_TRIES = 3


def _bin_dir() -> Path:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    for candidate in reversed(candidates):
        if Path(candidate, "initdb").exists():
            return Path(candidate)
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise PostgresNotAvailable(
        "PostgreSQL server binaries not found (apt-get install postgresql); "
        "or set TRAINPLANE_TEST_DATABASE_URL to an existing server"
    )


class ThrowawayPostgres:
    """Start with :meth:`start`, stop with :meth:`stop` (also a context manager)."""

    def __init__(self, *, durable_commits: bool = False) -> None:
        # Tests run with commits acknowledged before their WAL is written,
        # which is fast, but a crash (see :meth:`crash`) then loses the last
        # ones: a test that crashes this server wants durable commits.
        self.durable_commits = durable_commits
        self.bin = _bin_dir()
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="trainplane-pg-"))
        self.data = self.root / "data"
        self.as_root = os.geteuid() == 0

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = list(args)
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, check=True, capture_output=True, text=True)

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> ThrowawayPostgres:
        if self.as_root:
            os.chmod(self.root, 0o755)
            shutil.chown(self.root, "postgres")
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        for attempt in range(1, START_TRIES):
            try:
                self.resume()
                return self
            except PostgresDidNotStart as exc:
                print(
                    f"trainplane-pg: try {attempt} failed, trying a new port: {exc}",
                    file=sys.stderr,
                )
                self.port = free_port()
        self.resume()  # the last try: its error is the caller's
        return self

    def resume(self) -> None:
        """Starts the server on the existing data folder (after :meth:`crash`)."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off "
            f"-c synchronous_commit={'on' if self.durable_commits else 'off'} "
            "-c max_connections=300 -c shared_buffers=256MB"
        )
        try:
            self._run(
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-w",
                "-t",
                "120",
                "-o",
                options,
                "start",
            )
        except subprocess.CalledProcessError as exc:
            raise PostgresDidNotStart(
                f"pg_ctl start (port {self.port}) exited {exc.returncode}: "
                f"{(exc.stdout or '').strip()} {(exc.stderr or '').strip()}; "
                f"the end of {self.log}:\n{self.log_tail()}"
            ) from None
        self._wait_ready()

    @property
    def log(self) -> Path:
        return self.root / "log"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(unreadable: {exc})"

    def crash(self) -> None:
        """Stops the server the way a crash would (no checkpoint, every
        connection cut), keeping its data for :meth:`resume`."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")

    def _wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def dsn(self, database: str) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={database}"

    def create_database(self, name: str, template: str | None = None) -> str:
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            suffix = f" TEMPLATE {template}" if template else ""
            conn.execute(f'CREATE DATABASE "{name}"{suffix}')
        return self.url(name)

    def stop(self) -> None:
        if self.data.exists():
            with contextlib.suppress(subprocess.CalledProcessError):
                self.crash()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ThrowawayPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
