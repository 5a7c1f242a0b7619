"""Identifiers: time-ordered, URL-safe, 26 characters (ULID layout, lowercase).

Sorting ids sorts by creation time to the millisecond, which keeps B-tree inserts
local and makes ids readable in logs. Ray submission ids reuse attempt ids.
"""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, no i l o u


def new_id() -> str:
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))
