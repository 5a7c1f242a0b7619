"""Signing the dashboard in: a POST of the token sets an HttpOnly,
SameSite=Strict cookie (Secure over HTTPS) and a POST signs out; the old
``/login?token=`` link still works and drops the token at once. The API
takes that cookie as a credential for the dashboard's scripts, and a change
made with it needs the dashboard's header and origin (no CSRF). On SQLite
and PostgreSQL, the real app in-process."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from tests.factories import small_spec
from trainplane.api.authentication import DASHBOARD_HEADER, TOKEN_COOKIE

ROOT = "a-bootstrap-token-for-sign-in"
AUTH = {"Authorization": f"Bearer {ROOT}"}
ORIGIN = {"Origin": "http://testserver"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture
def app(settings):
    from trainplane.api.app import create_app

    return create_app(settings.model_copy(update={"bootstrap_token": SecretStr(ROOT)}))


@pytest.fixture
def browser(app):
    with TestClient(app) as client:
        yield client


def cookie_header(response) -> str:
    return next(v for k, v in response.headers.multi_items() if k == "set-cookie")


def signed_in(token: str = ROOT) -> dict[str, str]:
    return {"Cookie": f"{TOKEN_COOKIE}={token}"}


def test_the_sign_in_page_posts_the_token(browser):
    page = browser.get("/login")
    assert page.status_code == 200
    assert '<form method="post" action="/login"' in page.text
    assert 'name="token"' in page.text and "set-cookie" not in page.headers


def test_signing_in_by_post_sets_an_httponly_strict_cookie_and_goes_on(browser):
    answer = browser.post(
        "/login",
        content="token=" + ROOT + "&next=%2Fclusters",
        headers={**FORM, **ORIGIN},
        follow_redirects=False,
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/clusters"
    cookie = cookie_header(answer)
    assert cookie.startswith(f"{TOKEN_COOKIE}={ROOT};")
    for part in ("HttpOnly", "SameSite=strict", "Path=/", "Max-Age="):
        assert part in cookie
    assert "Secure" not in cookie  # plain http: a Secure cookie would never come back
    # The browser keeps it, and the pages know who it is.
    assert "<h1>Clusters</h1>" in browser.get("/clusters").text


def test_over_https_the_cookie_is_secure(app):
    with TestClient(app, base_url="https://testserver") as browser:
        answer = browser.post(
            "/login",
            content=f"token={ROOT}",
            headers={**FORM, "Origin": "https://testserver"},
            follow_redirects=False,
        )
    assert answer.status_code == 303 and "Secure" in cookie_header(answer)


@pytest.mark.parametrize("token", ["tp_wrong", ""])
def test_a_wrong_or_missing_token_signs_nothing_in(browser, token):
    answer = browser.post("/login", content=f"token={token}", headers=FORM)
    assert answer.status_code in (401, 422)
    assert "set-cookie" not in answer.headers
    assert "data-sign-in-error" in answer.text and '<form method="post"' in answer.text


def test_another_site_cannot_sign_the_browser_in_or_out(browser):
    evil = {**FORM, "Origin": "https://evil.example"}
    for path in ("/login", "/logout"):
        answer = browser.post(path, content=f"token={ROOT}", headers=evil, follow_redirects=False)
        assert answer.status_code == 403 and "set-cookie" not in answer.headers


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "\\\\evil"])
def test_after_signing_in_it_goes_nowhere_but_this_dashboard(browser, target):
    answer = browser.post(
        "/login", data={"token": ROOT, "next": target}, headers=ORIGIN, follow_redirects=False
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/"


def test_signing_out_clears_the_cookie(browser):
    answer = browser.post("/logout", headers=ORIGIN, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/login"
    cookie = cookie_header(answer)
    assert cookie.startswith(f'{TOKEN_COOKIE}="";') and "Max-Age=0" in cookie


def test_the_old_login_link_still_signs_in_and_drops_the_token_at_once(browser):
    answer = browser.get("/login", params={"token": ROOT}, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    assert "HttpOnly" in cookie_header(answer)
    wrong = browser.get("/login", params={"token": "tp_wrong"}, follow_redirects=False)
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers


def test_pages_renew_the_cookie_as_httponly_and_drop_a_revoked_one(browser):
    # A cookie set by an older dashboard's script (not HttpOnly) is set again as HttpOnly.
    page = browser.get("/", headers=signed_in())
    assert page.status_code == 200 and "HttpOnly" in cookie_header(page)
    gone = browser.get("/", headers=signed_in("tp_revoked-or-wrong"))
    assert gone.status_code == 401 and "Max-Age=0" in cookie_header(gone)


def test_the_api_takes_the_cookie_for_reads(browser):
    me = browser.get("/v1/whoami", headers=signed_in())
    assert me.status_code == 200 and me.json()["subject"] == "bootstrap"
    assert browser.get("/v1/whoami").status_code == 401


def test_a_change_by_cookie_needs_the_dashboards_header_and_origin(browser):
    job = browser.post("/v1/jobs", json=small_spec("victim", 1), headers=AUTH).json()["id"]
    cancel = f"/v1/jobs/{job}/cancel"
    header = {DASHBOARD_HEADER: "1"}
    refused = [
        browser.post(cancel, headers=signed_in()),  # a form on another site
        browser.post(cancel, headers={**signed_in(), **header}),  # no Origin at all
        browser.post(cancel, headers={**signed_in(), **header, "Origin": "http://evil.example"}),
        browser.post(cancel, headers={**signed_in(), **ORIGIN}),  # same origin, no header
    ]
    assert [r.status_code for r in refused] == [403] * 4, [r.text for r in refused]
    assert "X-Trainplane-Dashboard" in refused[0].json()["detail"]
    assert browser.get(f"/v1/jobs/{job}", headers=AUTH).json()["status"] == "QUEUED"

    done = browser.post(cancel, headers={**signed_in(), **header, **ORIGIN})
    assert done.status_code == 200 and done.json()["status"] == "CANCELLED"
    # Bearer tokens are not the browser's to send by itself: no header needed.
    other = browser.post("/v1/jobs", json=small_spec("other", 1), headers=AUTH).json()["id"]
    assert browser.post(f"/v1/jobs/{other}/cancel", headers=AUTH).status_code == 200


def test_browsers_that_blank_the_origin_are_judged_by_fetch_metadata(browser):
    """Under Referrer-Policy: no-referrer a browser sends Origin: null even
    for its own posts; Sec-Fetch-Site, which it sets itself, still says."""
    job = browser.post("/v1/jobs", json=small_spec("meta", 1), headers=AUTH).json()["id"]
    cancel = f"/v1/jobs/{job}/cancel"
    base = {**signed_in(), DASHBOARD_HEADER: "1", "Origin": "null"}
    assert browser.post(cancel, headers={**base, "Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert browser.post(cancel, headers={**base, "Sec-Fetch-Site": "same-site"}).status_code == 403
    assert browser.post(cancel, headers=base).status_code == 403  # null, and nothing else
    assert browser.post(cancel, headers={**base, "Sec-Fetch-Site": "same-origin"}).is_success
    own = {**FORM, "Origin": "null", "Sec-Fetch-Site": "same-origin"}
    signed = browser.post("/login", content=f"token={ROOT}", headers=own, follow_redirects=False)
    assert signed.status_code == 303
    other = {**FORM, "Sec-Fetch-Site": "cross-site"}
    refused = browser.post("/login", content=f"token={ROOT}", headers=other, follow_redirects=False)
    assert refused.status_code == 403


def test_a_cross_site_body_is_refused_before_it_is_read(browser):
    # A body that would be a 422 once parsed: the 403 shows it never was.
    refused = browser.post(
        "/v1/jobs",
        content="kind: [broken\n",
        headers={**signed_in(), "content-type": "application/yaml"},
    )
    assert refused.status_code == 403
