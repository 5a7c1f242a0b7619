"""A sweep's trials on a terminal: the table ``jobs trials`` prints, the best
trial in a line, and the live view ``submit --wait`` keeps while a sweep runs.

The live view redraws the whole table in place on a terminal. In a CI log
(not a terminal) it prints a plain line for each trial whose status changed,
and for a running trial's progress at most one line every ``interval``
seconds, so fast trials do not flood the log.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from typing import Any, TextIO

from trainplane.cli.common import TERMINAL

# The live table shows at most this many trials on a terminal of unknown size.
DEFAULT_HEIGHT = 24
# The live table is redrawn at most this often.
REDRAW_SECONDS = 0.5
BEST_MARK = "*"


def number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value if isinstance(value, str) else json.dumps(value)
    return f"{value:.4g}"


def parameter_names(items: list[dict[str, Any]]) -> dict[str, str]:
    """Each swept path and its column name: the path's last part
    (``lr`` for ``entrypoint.args.lr``) unless two paths end the same."""
    paths = list(dict.fromkeys(path for item in items for path in item.get("parameters") or {}))
    ends = [path.rsplit(".", 1)[-1] for path in paths]
    return {
        path: end if ends.count(end) == 1 else path for path, end in zip(paths, ends, strict=True)
    }


def describe_parameters(parameters: dict[str, Any], names: dict[str, str] | None = None) -> str:
    names = names or parameter_names([{"parameters": parameters}])
    return " ".join(f"{names.get(path, path)}={number(v)}" for path, v in parameters.items())


def best_id(listing: dict[str, Any]) -> str | None:
    best = listing.get("best_trial")
    return best.get("id") if isinstance(best, dict) else None


def table_lines(listing: dict[str, Any], *, reasons: bool = True) -> list[str]:
    """The trials as aligned lines, header first, by number; the best marked."""
    items = sorted(listing.get("items") or [], key=lambda item: item["number"])
    names = parameter_names(items)
    metric = (listing.get("objective") or {}).get("metric", "objective")
    best = best_id(listing)
    header = ["#", "TRIAL", "STATUS", *(n.upper() for n in names.values())]
    header += [metric.upper(), "BEST", "STEP"] + (["REASON"] if reasons else [])
    rows = []
    for item in items:
        parameters = item.get("parameters") or {}
        row = [
            f"{item['number']}{BEST_MARK if item['id'] == best else ''}",
            item["name"],
            item["status"],
            *(number(parameters.get(path)) for path in names),
            number(item.get("last_value")),
            number(item.get("best_value")),
            number(item.get("step")),
        ]
        rows.append(row + ([item.get("reason") or ""] if reasons else []))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def best_line(listing: dict[str, Any]) -> str:
    """``best trial lr-search-3 (lr=0.0012): loss 0.4123 (min)``, or why there is none."""
    best = listing.get("best_trial")
    objective = listing.get("objective") or {}
    if not isinstance(best, dict):
        metric = objective.get("metric", "its objective")
        return f"no best trial yet: no trial succeeded with {metric} reported"
    value = (best.get("objective") or {}).get("value")
    mode = f" ({objective['mode']})" if objective.get("mode") else ""
    return (
        f"best trial {best['name']} ({describe_parameters(best.get('parameters') or {})}): "
        f"{objective.get('metric', 'objective')} {number(value)}{mode}"
    )


def print_trials(listing: dict[str, Any], echo: Callable[[str], Any]) -> None:
    if not listing.get("items"):
        echo("no trials yet")
        return
    for line in table_lines(listing):
        echo(line)
    echo("")
    echo(f"{BEST_MARK} {best_line(listing)}")


def trial_line(item: dict[str, Any], metric: str, names: dict[str, str]) -> str:
    """One trial as a plain log line."""
    parts = [f"trial {item['number']} {item['name']} {item['status']}"]
    if item.get("parameters"):
        parts.append(describe_parameters(item["parameters"], names))
    if item.get("step") is not None:
        parts.append(f"step {item['step']}")
    if item.get("last_value") is not None:
        parts.append(f"{metric}={number(item['last_value'])}")
    if item.get("best_value") is not None:
        parts.append(f"(best {number(item['best_value'])})")
    line = " ".join(parts)
    return f"{line}: {item['reason']}" if item.get("reason") else line


class TrialBoard:
    """What ``submit --wait`` shows of a running sweep, on ``stream``."""

    def __init__(
        self,
        stream: TextIO,
        *,
        terminal: bool,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.terminal = terminal
        self.interval = interval
        self.clock = clock
        self.seen: tuple[str, str] | None = None  # the sweep's status and reason
        self.drawn: list[str] = []  # the table lines on screen (terminal)
        self.drawn_at: float | None = None
        # Plain lines: each trial's status and reason, and when its progress was shown.
        self.trial_seen: dict[str, tuple[str, str]] = {}
        self.trial_shown: dict[str, tuple[float, Any]] = {}

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def _erase(self) -> None:
        if self.drawn:
            # To the start of the table's first line, and clear to the end of the screen.
            self._write(f"\x1b[{len(self.drawn)}F\x1b[J")
            self.drawn = []

    def line(self, message: str) -> None:
        """A line of its own (a status change, a message), above the table."""
        shown = self.drawn
        self._erase()
        self._write(message + "\n")
        if shown:
            self._draw(shown)

    def show(self, sweep: dict[str, Any], listing: dict[str, Any]) -> None:
        key = (sweep["status"], sweep["reason"])
        if key != self.seen:
            self.seen = key
            if sweep["status"] not in TERMINAL:  # the end is reported once, by the caller
                self.line(f"sweep {sweep['id']} {sweep['status']}: {sweep['reason']}")
        if self.terminal:
            self._redraw(listing, final=sweep["status"] in TERMINAL)
        else:
            self._plain(listing)

    def _redraw(self, listing: dict[str, Any], *, final: bool) -> None:
        if not listing.get("items"):
            return
        now = self.clock()
        if not final and self.drawn_at is not None and now - self.drawn_at < REDRAW_SECONDS:
            return
        size = shutil.get_terminal_size((100, DEFAULT_HEIGHT))
        lines = [text[: size.columns - 1] for text in table_lines(listing, reasons=True)]
        room = max(3, size.lines - 2)
        if len(lines) > room:
            # Lines longer than the screen would scroll it: keep the latest trials.
            hidden = len(lines) - room + 1
            lines = [lines[0], f"({hidden} earlier trials not shown)", *lines[1 + hidden :]]
        if lines != self.drawn:
            self._erase()
            self._draw(lines)
        self.drawn_at = now

    def _draw(self, lines: list[str]) -> None:
        self._write("".join(text + "\n" for text in lines))
        self.drawn = lines

    def _plain(self, listing: dict[str, Any]) -> None:
        items = sorted(listing.get("items") or [], key=lambda item: item["number"])
        names = parameter_names(items)
        metric = (listing.get("objective") or {}).get("metric", "objective")
        now = self.clock()
        for item in items:
            key = (item["status"], item.get("reason") or "")
            progress = (item.get("step"), item.get("last_value"))
            shown = self.trial_shown.get(item["id"])
            changed = self.trial_seen.get(item["id"]) != key
            due = shown is not None and shown[1] != progress and now - shown[0] >= self.interval
            if changed or due:
                self._write(trial_line(item, metric, names) + "\n")
                self.trial_seen[item["id"]] = key
                self.trial_shown[item["id"]] = (now, progress)

    def close(self) -> None:
        """The table stays on a terminal; nothing is left half-drawn."""
        self.drawn = []
