"""Attempt tokens: the credential an attempt's runtime reports progress with.

A token is HMAC-SHA256(server key, attempt id), not a random value kept per
launch: a launch repeated after a scheduler crash is a no-op on Ray (the
submission id is the attempt id), so the runtime keeps the token of the first
launch, and the repeat must compute the same one. Verifying recomputes it, so
nothing per attempt is stored. The token is honoured only while its attempt is
live; that check belongs to the service using it (``services.progress``).

The server key is ``TRAINPLANE_SECRET_KEY`` when set, otherwise a random key
generated once and kept in ``server_secrets``, so that every replica against one
database derives the same tokens.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading

from pydantic import SecretStr
from sqlalchemy import select
from sqlalchemy.orm import Session

from trainplane.db.access_models import ServerSecret
from trainplane.db.base import upsert_insert, utcnow
from trainplane.errors import UnauthenticatedError

KEY_NAME = "attempt-token-key"
KEY_BYTES = 32


def attempt_token(key: bytes, attempt_id: str) -> str:
    return hmac.new(key, attempt_id.encode(), hashlib.sha256).hexdigest()


def check_attempt_token(key: bytes, attempt_id: str, token: str | None) -> None:
    """Raise UnauthenticatedError unless ``token`` is the one of ``attempt_id``."""
    if not token:
        raise UnauthenticatedError("an attempt token is required: Authorization: Bearer <token>")
    expected = attempt_token(key, attempt_id).encode()
    if not hmac.compare_digest(expected, token.encode()):
        raise UnauthenticatedError(f"the token is not the one of attempt {attempt_id}")


class TokenKey:
    """The server key, loaded at most once per process: it never changes once
    stored, and the API needs it on every progress report."""

    def __init__(self, configured: SecretStr | None) -> None:
        self._key = configured.get_secret_value().encode() if configured is not None else None
        self._lock = threading.Lock()

    def get(self, session: Session) -> bytes:
        if self._key is None:
            with self._lock:
                if self._key is None:
                    self._key = bytes.fromhex(stored_secret(session, KEY_NAME))
        return self._key


def stored_secret(session: Session, name: str) -> str:
    """The secret called ``name`` (hex), generated and stored on first use.
    Replicas starting together may each generate one; the first insert wins and
    all of them read it back."""
    with session.begin():
        value = session.scalar(select(ServerSecret.value).where(ServerSecret.name == name))
        if value is not None:
            return value
        session.execute(
            upsert_insert(session, ServerSecret)
            .values(name=name, value=secrets.token_hex(KEY_BYTES), created_at=utcnow())
            .on_conflict_do_nothing(index_elements=[ServerSecret.name])
        )
        # A fresh statement: under READ COMMITTED it sees the row of whichever
        # insert won, ours or a concurrent replica's.
        return session.scalars(select(ServerSecret.value).where(ServerSecret.name == name)).one()
