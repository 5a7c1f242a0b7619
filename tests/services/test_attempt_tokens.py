"""Attempt tokens: derived from the server key and the attempt id, checked in
constant time, and the key generated once per database when none is set."""

from __future__ import annotations

import threading

import pytest
from pydantic import SecretStr
from sqlalchemy import func, select

from trainplane.db.access_models import ServerSecret
from trainplane.errors import UnauthenticatedError
from trainplane.services.attempt_tokens import (
    KEY_NAME,
    TokenKey,
    attempt_token,
    check_attempt_token,
)

KEY = b"k" * 32


def _stored(session):
    with session.begin():
        return session.scalar(select(func.count()).select_from(ServerSecret))


def test_a_token_is_the_same_for_each_launch_and_differs_by_attempt_and_key():
    token = attempt_token(KEY, "attempt-a")
    assert token == attempt_token(KEY, "attempt-a")  # a repeated launch agrees
    assert len(token) == 64 and int(token, 16) >= 0
    assert token != attempt_token(KEY, "attempt-b")
    assert token != attempt_token(b"other" * 8, "attempt-a")


@pytest.mark.parametrize(
    "token",
    [None, "", "0" * 64, attempt_token(KEY, "attempt-b"), "not hex: é"],
    ids=["missing", "empty", "zeros", "another-attempts", "non-ascii"],
)
def test_only_the_attempts_own_token_checks_out(token):
    check_attempt_token(KEY, "attempt-a", attempt_token(KEY, "attempt-a"))
    with pytest.raises(UnauthenticatedError):
        check_attempt_token(KEY, "attempt-a", token)


def test_without_a_configured_key_one_is_generated_once_and_shared(session, sessions):
    first = TokenKey(None).get(session)
    assert len(first) == 32
    # Another replica (another TokenKey, another session) reads the same key.
    with sessions() as other:
        assert TokenKey(None).get(other) == first
    assert _stored(session) == 1


def test_replicas_starting_together_agree_on_one_key(session, sessions):
    keys: list[bytes] = []
    start = threading.Barrier(4)

    def replica():
        with sessions() as own:
            start.wait()
            keys.append(TokenKey(None).get(own))

    threads = [threading.Thread(target=replica) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(keys) == 4 and len(set(keys)) == 1
    assert _stored(session) == 1


def test_a_configured_key_is_used_and_nothing_is_stored(session):
    key = TokenKey(SecretStr("a-configured-secret-key-0123456789")).get(session)
    assert key == b"a-configured-secret-key-0123456789"
    assert _stored(session) == 0
    with session.begin():
        assert session.get(ServerSecret, KEY_NAME) is None
