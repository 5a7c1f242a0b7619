"""The local admin token of ``trainplane up``: made once, kept in a file only
its owner can read, reused at every start, and never made where auth was set
up otherwise."""

from __future__ import annotations

import stat

import pytest

from trainplane.services import tokens
from trainplane.services.access import Role


@pytest.fixture(autouse=True)
def _forget_auth_state():
    # "Auth is on" is remembered per engine for good, and the PostgreSQL
    # engine of these tests outlives each test's data.
    yield
    tokens._enabled.clear()


def test_the_first_start_makes_an_admin_token_and_keeps_it_private(session, tmp_path):
    path = tmp_path / "home" / "token"
    secret = tokens.ensure_local_token(session, path)
    assert secret and secret.startswith("tp_")
    assert path.read_text().strip() == secret
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    caller = tokens.caller_for(session, secret)
    assert (caller.subject, caller.everywhere) == (tokens.LOCAL_NAME, Role.ADMIN)
    # Every later start finds the same token.
    assert tokens.ensure_local_token(session, path) == secret


def test_no_local_token_where_someone_set_up_auth(session, tmp_path):
    assert tokens.bootstrap(session, "an-operator-chose-this-token")
    path = tmp_path / "token"
    assert tokens.ensure_local_token(session, path) is None
    assert not path.exists()


def test_a_revoked_local_token_is_not_handed_out(session, tmp_path):
    path = tmp_path / "token"
    secret = tokens.ensure_local_token(session, path)
    view = next(v for v in tokens.list_tokens(session, tokens.caller_for(session, secret)))
    tokens.revoke_token(session, tokens.caller_for(session, secret), view.token.id)
    assert tokens.ensure_local_token(session, path) is None
