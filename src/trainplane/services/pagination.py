"""Opaque keyset cursors: a page ends at a (created_at, id) pair and the next
page starts strictly after it, so concurrent inserts never shift or repeat rows."""

from __future__ import annotations

import base64
import json
from datetime import datetime

from trainplane.errors import InvalidInputError

MAX_PAGE_SIZE = 200
DEFAULT_PAGE_SIZE = 50
# Event ids are 64-bit (BIGINT): an `after` past the largest one is no id at all.
MAX_EVENT_ID = 2**63 - 1


def encode_cursor(created_at: datetime, row_id: str) -> str:
    raw = json.dumps([created_at.isoformat(), row_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created_at, row_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        moment = datetime.fromisoformat(created_at)
        # NUL: PostgreSQL cannot compare text holding it; no id does.
        if moment.tzinfo is None or not isinstance(row_id, str) or "\x00" in row_id:
            raise ValueError
        return moment, row_id
    except (ValueError, TypeError, UnicodeDecodeError, json.JSONDecodeError):
        raise InvalidInputError(
            "cursor", "not a cursor returned by this API; omit it to start from the first page"
        ) from None
