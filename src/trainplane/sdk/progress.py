"""One line saying where a job stands, kept up to date while a call waits:
redrawn in place in a notebook (IPython's display) or a terminal, printed as
a new line on each change otherwise (a log file, CI)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from trainplane.sdk.models import Job


def describe(job: Job, started: float) -> str:
    parts = [f"job {job.id} ({job.name})", str(job.status)]
    progress = job.progress
    if progress is not None and progress.step is not None:
        total = f"/{progress.total_steps}" if progress.total_steps else ""
        parts.append(f"step {progress.step}{total}")
        if progress.attempt > 1:
            parts.append(f"attempt {progress.attempt}")
    loss = job.latest_metrics.get("loss")
    if loss is not None:
        parts.append(f"loss {loss:.4g}")
    if job.reason:
        parts.append(f"- {job.reason}")
    parts.append(f"[{time.monotonic() - started:.0f}s]")
    return " ".join(parts)


class ProgressLine:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.last = ""
        self.handle: Any = _notebook_handle()
        self.redraw = self.handle is None and self.stream.isatty()

    def show(self, job: Job) -> None:
        """For ``wait(on_progress=...)``, which calls it on each change."""
        text = self.last = describe(job, self.started)
        if self.handle is not None:
            self.handle.update(_plain(text))
        elif self.redraw:
            self.stream.write("\r\x1b[2K" + text)
            self.stream.flush()
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self.redraw and self.last:
            self.stream.write("\n")
            self.stream.flush()


def _notebook_handle() -> Any:
    """A display handle when running in a Jupyter kernel, else None."""
    if "IPython" not in sys.modules:  # not imported: no kernel to display in
        return None
    try:
        from IPython import get_ipython
        from IPython.display import display

        ipython = get_ipython()
        if ipython is None or type(ipython).__name__ != "ZMQInteractiveShell":
            return None
        return display(_plain("trainplane: submitting"), display_id=True)
    except Exception:
        return None


class _plain:
    """Shown as text in a notebook: no HTML, so it reads the same everywhere."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text
