"""An attempt's driver never outlives the Ray job supervisor that started it,
whatever moment the stop comes at, and frees what it holds on its way out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trainplane.runtime import env as tp_env
from trainplane.runtime.processes import EXIT_ORPHANED
from trainplane.scheduler.launch import DRIVER_ENTRYPOINT

pytestmark = pytest.mark.ray_free


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers: it has exited, and waits to be reaped.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


def test_the_entrypoint_makes_the_driver_the_process_ray_started(tmp_path: Path) -> None:
    """Ray runs the entrypoint with ``sh -c`` and signals the process it
    started: that must be the driver itself, not a shell in front of it."""
    shim = tmp_path / "python"
    shim.write_text(f'#!/bin/sh\necho "$$ ${tp_env.SUPERVISOR_PID} $*"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    shell = subprocess.Popen(
        DRIVER_ENTRYPOINT, shell=True, env=env, stdout=subprocess.PIPE, text=True
    )
    out, _ = shell.communicate(timeout=30)
    pid, supervisor, args = out.strip().split(" ", 2)
    assert int(pid) == shell.pid  # exec: no process between Ray and the driver
    assert int(supervisor) == os.getpid()  # the starter, as the driver will check it
    assert args == "-m trainplane.runtime.driver"


def test_a_driver_whose_supervisor_is_already_gone_starts_nothing(tmp_path: Path) -> None:
    """The stop raced the start: the supervisor died while Python imported.
    The driver leaves before it reads its spec or connects to Ray."""
    env = {
        **os.environ,
        tp_env.SUPERVISOR_PID: str(os.getpid() + 999_999),  # not our parent
        tp_env.SPEC: "{not even read",
    }
    done = subprocess.run(
        [sys.executable, "-m", "trainplane.runtime.driver"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == EXIT_ORPHANED, done.stdout + done.stderr
    assert "supervisor is gone before the start" in done.stdout
    assert "readable spec" not in done.stdout


ORPHAN = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from trainplane.runtime.processes import OrphanWatch

    marker, hang = Path(sys.argv[1]), sys.argv[2] == "hang"
    watch = OrphanWatch(os.getppid(), poll_seconds=0.1, cleanup_seconds=1.0)
    if hang:
        watch.add_cleanup(lambda: time.sleep(600))
    watch.add_cleanup(lambda: marker.write_text("freed"))
    watch.start()
    print(os.getpid(), flush=True)
    time.sleep(600)
    """
)


def _orphan_after_parent_dies(
    tmp_path: Path, mode: str
) -> tuple[int, Path, float, subprocess.Popen[str]]:
    """Starts ORPHAN under a middle process, kills the middle one, and returns
    the orphan's pid, its cleanup marker, when the middle one died, and the
    middle one (whose output pipe the orphan still writes to)."""
    marker = tmp_path / f"freed-{mode}"
    script = tmp_path / "orphan.py"
    script.write_text(ORPHAN)
    middle = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2], sys.argv[3]]); "
            "time.sleep(600)",
            str(script),
            str(marker),
            mode,
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert middle.stdout is not None
    orphan = int(middle.stdout.readline())
    middle.send_signal(signal.SIGKILL)
    middle.wait()
    return orphan, marker, time.monotonic(), middle


def test_an_orphaned_driver_frees_what_it_holds_and_leaves(tmp_path: Path) -> None:
    orphan, marker, died_at, middle = _orphan_after_parent_dies(tmp_path, "plain")
    try:
        assert _wait_gone(orphan, 15), "the orphan kept running"
        assert time.monotonic() - died_at < 10
        assert marker.read_text() == "freed"
        assert middle.stdout is not None
        assert "supervisor is gone" in middle.stdout.read()
    finally:
        if not _gone(orphan):
            os.kill(orphan, signal.SIGKILL)


def test_a_cleanup_that_hangs_does_not_keep_the_orphan_alive(tmp_path: Path) -> None:
    """The cluster a cleanup talks to may be what is gone: it gets its
    bounded time, the next cleanup still runs, and the process leaves, even
    though the reader of its output is gone too (its last words hit a closed
    pipe)."""
    orphan, marker, died_at, middle = _orphan_after_parent_dies(tmp_path, "hang")
    assert middle.stdout is not None
    middle.stdout.close()
    try:
        assert _wait_gone(orphan, 15), "a hanging cleanup kept the orphan alive"
        assert marker.read_text() == "freed"
        assert time.monotonic() - died_at >= 1.0  # the hanging one had its second
    finally:
        if not _gone(orphan):
            os.kill(orphan, signal.SIGKILL)
