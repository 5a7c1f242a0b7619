"""What ``submit --wait`` shows while it waits, on stderr.

Every change of status (with its reason) is a line. While the job runs, a
progress line gives the step, the loss (and eval_loss, and any metric a
``--fail-on`` gate names), the step rate and an ETA from it. For a CI log (stderr
not a terminal) these are plain lines, no carriage returns or colours, at most one
every ``interval`` seconds unless the step moved by a tenth of the run, and a
line now and then while the step stands still, so a stuck job is visible in the
log. On a terminal one line is redrawn in place instead.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TextIO

from trainplane.cli.common import TERMINAL

DEFAULT_INTERVAL = 15.0
# A step jump of this fraction of the run is shown before the interval is over.
BIG_STEP_FRACTION = 0.1
# While the step stands still, a line every this many intervals.
STALL_INTERVALS = 4
# The step rate is measured over this much of the recent past.
RATE_WINDOW_SECONDS = 300.0
# A terminal line is redrawn at most this often.
REDRAW_SECONDS = 0.5
SHOWN_METRICS = ("loss", "eval_loss")


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _timestamp(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


class StepRate:
    """Steps per second over the recent past, from the server's own times of
    each step (``last_progress_at``), so the poll interval does not skew it."""

    def __init__(self) -> None:
        self.samples: deque[tuple[float, int]] = deque()
        self.attempt: int | None = None

    def add(self, attempt: int, step: int, at: float | None) -> None:
        if attempt != self.attempt or (self.samples and step < self.samples[-1][1]):
            # A new attempt resumes from a checkpoint: its pace starts over.
            self.samples.clear()
            self.attempt = attempt
        if at is None or (self.samples and self.samples[-1][1] == step):
            return
        self.samples.append((at, step))
        while len(self.samples) > 2 and at - self.samples[1][0] >= RATE_WINDOW_SECONDS:
            self.samples.popleft()

    def per_second(self) -> float | None:
        if len(self.samples) < 2:
            return None
        (t0, s0), (t1, s1) = self.samples[0], self.samples[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None


def _number(value: float) -> str:
    return f"{value:.4g}"


def _rate(per_second: float) -> str:
    if per_second >= 10:
        return f"{per_second:.0f} steps/s"
    if per_second >= 0.1:
        return f"{per_second:.2f} steps/s"
    return f"{60 * per_second:.2f} steps/min"


def describe(job: dict[str, Any], rate: float | None, metrics: Iterable[str]) -> str:
    """``step 120/500 (24%) loss=0.4123 eval_loss=0.51 1.93 steps/s ETA 3m17s``."""
    progress = job["progress"]
    step, total = progress["step"], progress.get("total_steps")
    parts = [f"step {step}"]
    if total:
        parts = [f"step {step}/{total} ({100 * step / total:.0f}%)"]
    latest = job.get("latest_metrics") or {}
    parts += [f"{name}={_number(latest[name])}" for name in metrics if name in latest]
    if rate:
        parts.append(_rate(rate))
        if total and total > step:
            parts.append(f"ETA {duration((total - step) / rate)}")
    return " ".join(parts)


class ProgressPrinter:
    def __init__(
        self,
        stream: TextIO,
        *,
        terminal: bool,
        interval: float = DEFAULT_INTERVAL,
        metrics: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.terminal = terminal
        self.interval = interval
        self.metrics = list(dict.fromkeys([*SHOWN_METRICS, *metrics]))
        self.clock = clock
        self.rate = StepRate()
        self.seen: tuple[str, str] | None = None
        self.last_line_at: float | None = None
        self.last_line_step: int | None = None
        self.step_changed_at: float | None = None
        self.step: int | None = None
        self.drawn = False  # a terminal line is on screen, without its newline
        self.status_since = clock()
        self.last_output_at = clock()

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def line(self, message: str) -> None:
        """A line of its own (a status change, a message), above any progress."""
        if self.drawn:
            self._write("\r\x1b[K")
            self.drawn = False
        self._write(message + "\n")

    def update(self, job: dict[str, Any], *, terminal_status: bool = False) -> None:
        """Show what changed since the last poll. The final status is not shown
        here (the end is reported once, with its results)."""
        now = self.clock()
        key = (job["status"], job["reason"])
        if key != self.seen:
            if self.seen is None or key[0] != self.seen[0]:
                self.status_since = now
            self.seen = key
            if not terminal_status:
                self.line(f"job {job['id']} {job['status']}: {job['reason']}")
                self.last_output_at = now
        progress = job.get("progress")
        if job["status"] != "RUNNING" or not progress or progress.get("step") is None:
            self._remind(job, now)
            return
        step = progress["step"]
        self.rate.add(progress.get("attempt", 0), step, _timestamp(progress["last_progress_at"]))
        if step != self.step:
            self.step, self.step_changed_at = step, now
        text = describe(job, self.rate.per_second(), self.metrics)
        if self.terminal:
            if self.last_line_at is None or now - self.last_line_at >= REDRAW_SECONDS:
                width = shutil.get_terminal_size((100, 24)).columns - 1
                self._write("\r\x1b[K" + text[:width])
                self.drawn = True
                self.last_line_at = now
            return
        if self._plain_line_due(step, progress.get("total_steps"), now):
            if step == self.last_line_step and self.step_changed_at is not None:
                text += f" (no new step for {duration(now - self.step_changed_at)})"
            self.line(text)
            self.last_line_at, self.last_line_step = now, step
            self.last_output_at = now

    def _remind(self, job: dict[str, Any], now: float) -> None:
        """In a CI log, a line now and then while nothing changes, so a long
        wait in the queue (or a run that reports nothing) is visibly alive."""
        if self.terminal or job["status"] in TERMINAL:
            return
        if now - self.last_output_at < STALL_INTERVALS * self.interval:
            return
        self.line(
            f"job {job['id']} still {job['status']} after "
            f"{duration(now - self.status_since)}: {job['reason']}"
        )
        self.last_output_at = now

    def _plain_line_due(self, step: int, total: int | None, now: float) -> bool:
        if self.last_line_at is None:
            return True
        since = now - self.last_line_at
        if step == self.last_line_step:
            return since >= STALL_INTERVALS * self.interval
        if since >= self.interval:
            return True
        moved = step - (self.last_line_step or 0)
        return bool(total) and moved >= BIG_STEP_FRACTION * total

    def close(self) -> None:
        if self.drawn:
            self._write("\n")
            self.drawn = False
