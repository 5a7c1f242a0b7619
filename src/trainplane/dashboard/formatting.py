"""How the pages write numbers, times and statuses (Jinja filters)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import yaml

# What a page shows for a value that does not exist (yet).
NOTHING = "\N{EN DASH}"

STATUS_TONES = {
    "QUEUED": "waiting",
    "STARTING": "active",
    "RUNNING": "active",
    "RESTARTING": "warning",
    "CANCELLING": "warning",
    "SUCCEEDED": "good",
    "FAILED": "bad",
    "CANCELLED": "muted",
}


def duration(seconds: float | None) -> str:
    if seconds is None:
        return NOTHING
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def money(value: float | None) -> str:
    if value is None:
        return NOTHING
    if 0 < value < 0.01:
        return "<$0.01"
    return f"${value:,.2f}"


def hours(value: float | None) -> str:
    if value is None:
        return NOTHING
    if value == 0:
        return "0"
    if value < 0.01:
        return "<0.01"
    return f"{value:,.2f}"


def number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return NOTHING if value is None else str(value)


def parse_time(value: str | datetime | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def when(value: str | datetime | None) -> str:
    moment = parse_time(value)
    if moment is None:
        return NOTHING
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(value: str | datetime | None) -> str:
    moment = parse_time(value)
    return "" if moment is None else moment.astimezone(UTC).isoformat()


def tone(status: str) -> str:
    return STATUS_TONES.get(status, "muted")


def as_yaml(document: Any) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100)


FILTERS = {
    "duration": duration,
    "money": money,
    "hours": hours,
    "number": number,
    "when": when,
    "iso": iso,
    "tone": tone,
    "yaml": as_yaml,
}
