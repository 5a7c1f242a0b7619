"""Finding an attempt's processes on this machine (tests kill or look for them)."""

from __future__ import annotations

from pathlib import Path


def attempt_processes(attempt_id: str, marker: str) -> list[int]:
    """PIDs of this machine's processes of one attempt (by the attempt id in
    their environment, or in the command line a rank forked by the rank pool
    gives itself) whose command line contains ``marker``."""
    found = []
    needle = f"TRAINPLANE_ATTEMPT_ID={attempt_id}".encode()
    named = f" attempt {attempt_id}"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in command and (needle in environ or command.rstrip().endswith(named)):
            found.append(int(entry.name))
    return found
