"""The first token of an installation is an installation-wide admin: any
other first token is refused, saying why, so that turning auth on never
leaves the installation without someone who can administer it."""

from __future__ import annotations

import pytest

from trainplane.services.tokens import FIRST_TOKEN_NOT_ADMIN


@pytest.mark.parametrize(
    "body",
    [
        {"name": "team", "project": "default", "role": "admin"},
        {"name": "team", "project": "default", "role": "member"},
        {"name": "everywhere-viewer", "role": "viewer"},
        {"name": "everywhere-member", "role": "member"},
    ],
    ids=["project admin", "project member", "global viewer", "global member"],
)
def test_a_first_token_that_is_not_an_installation_admin_is_refused(api, body):
    refused = api.post("/v1/tokens", json=body)
    assert refused.status_code == 409, refused.text
    assert refused.json()["detail"] == FIRST_TOKEN_NOT_ADMIN
    assert "nobody who can administer the installation" in FIRST_TOKEN_NOT_ADMIN
    # Nothing was created: auth is still off, and the token list is empty.
    assert api.get("/v1/tokens").json()["items"] == []


def test_after_an_installation_admin_any_token_may_follow(api):
    first = api.post("/v1/tokens", json={"name": "root", "role": "admin"})
    assert first.status_code == 201, first.text
    root = {"Authorization": f"Bearer {first.json()['token']}"}
    # Auth is on now: the anonymous local user is gone.
    assert api.post("/v1/tokens", json={"name": "x", "role": "admin"}).status_code == 401
    second = api.post(
        "/v1/tokens", json={"name": "team", "project": "default", "role": "viewer"}, headers=root
    )
    assert second.status_code == 201, second.text
