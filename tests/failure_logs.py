"""What a failed cluster test's report shows besides its traceback: the end
of each log written while it ran (its servers', its Ray head's and its Ray
job drivers', which carry the workers' output). A cluster test that fails
on CI can then be understood from the CI log alone."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

LINES_PER_LOG = 40
MOST_LOGS = 8


def logs_written_since(where: Iterable[tuple[Path, str]], since: float) -> list[Path]:
    """The files under each root matching its pattern modified at or after
    ``since`` (a time.time()), newest first, at most MOST_LOGS."""
    found: dict[Path, float] = {}
    for root, pattern in where:
        for path in root.rglob(pattern):
            try:
                modified = path.stat().st_mtime
            except OSError:
                continue
            if modified >= since and path.is_file():
                found[path] = modified
    return sorted(found, key=found.__getitem__, reverse=True)[:MOST_LOGS]


def tail(path: Path, lines: int = LINES_PER_LOG) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(unreadable: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def report_sections(where: Iterable[tuple[Path, str]], since: float) -> Iterator[tuple[str, str]]:
    """``(root, glob pattern)`` pairs to look in -> pytest report sections."""
    for path in logs_written_since(where, since):
        yield f"log {path} (last {LINES_PER_LOG} lines)", tail(path)
