"""Claiming rows under a lease, the one way schedulers take work.

Due rows (the lease free, or run out) are locked with ``FOR UPDATE SKIP
LOCKED`` on PostgreSQL, so concurrent claimers take disjoint batches, and are
stamped with a fresh token. Whoever holds a row's token owns it until the lease
runs out; its results are applied only where the token still matches.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, or_, select, update
from sqlalchemy.orm import InstrumentedAttribute, Session


def claim_due(
    session: Session,
    key: InstrumentedAttribute[Any],
    eligible: ColumnElement[bool],
    now: datetime,
    *,
    lease_seconds: float,
    limit: int,
) -> tuple[str, list[Any]]:
    """In the caller's transaction: lease up to ``limit`` due rows of the
    table of ``key`` (a primary key column of a model with ``lease_token`` and
    ``lease_expires_at``) that are ``eligible``, the longest-due first.
    Returns the token and the claimed keys."""
    model = key.class_
    token = uuid.uuid4().hex
    expires = model.lease_expires_at
    due = (
        select(key)
        .where(eligible, or_(expires.is_(None), expires <= now))
        .order_by(expires.is_not(None), expires)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    keys = list(session.scalars(due))
    if keys:
        session.execute(
            update(model)
            .where(key.in_(keys))
            .values(lease_token=token, lease_expires_at=now + timedelta(seconds=lease_seconds))
        )
    return token, keys
