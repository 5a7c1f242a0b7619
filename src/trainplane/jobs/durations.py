"""Human durations such as ``24h``, ``90m``, ``1h30m`` or ``45s``."""

from __future__ import annotations

import re

_UNIT_SECONDS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> int:
    """Seconds in ``text``. Raises ValueError naming the accepted forms."""
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise ValueError(
            f"invalid duration {text!r}: use a number with a unit d, h, m or s, "
            "for example 24h, 90m or 1h30m"
        )
    seconds = sum(
        int(amount) * _UNIT_SECONDS[unit]
        for amount, unit in zip(match.groups(), "dhms", strict=True)
        if amount
    )
    if seconds == 0:
        raise ValueError(f"invalid duration {text!r}: must be longer than zero")
    return seconds


def format_duration(seconds: int) -> str:
    """The shortest ``1d2h3m4s`` form of ``seconds`` (> 0)."""
    parts = []
    for unit, size in _UNIT_SECONDS.items():
        amount, seconds = divmod(seconds, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts) or "0s"
