"""Every answer tells browsers: no framing, nothing from other origins, no
referrer, no sniffing; and the dashboard's pages need nothing the policy
forbids (no inline scripts, styles or event handlers)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainplane.api.security_headers import CONTENT_SECURITY_POLICY

TEMPLATES = Path(__file__).resolve().parents[2] / "src" / "trainplane" / "dashboard" / "templates"
ANSWERS = [
    ("GET", "/"),
    ("GET", "/clusters"),
    ("GET", "/submit"),
    ("GET", "/login"),
    ("GET", "/static/app.js"),
    ("GET", "/healthz"),
    ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/nope"),  # a problem answer
    ("POST", "/v1/jobs"),  # refused by validation
    ("GET", "/no-such-page"),
]


@pytest.mark.parametrize(("method", "path"), ANSWERS)
def test_every_answer_carries_the_security_headers(api, method, path):
    headers = api.request(method, path).headers
    policy = headers["content-security-policy"]
    assert policy == CONTENT_SECURITY_POLICY
    for part in (
        "default-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "object-src 'none'",
    ):
        assert part in policy
    assert headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["x-content-type-options"] == "nosniff"


def test_the_api_explorer_keeps_framing_forbidden(api):
    headers = api.get("/docs").headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"


@pytest.mark.parametrize("template", sorted(p.name for p in TEMPLATES.glob("*.html")))
def test_templates_use_nothing_a_strict_policy_blocks(template):
    text = (TEMPLATES / template).read_text()
    assert not re.search(r"\sstyle=", text), "inline style attribute"
    assert not re.search(r"\son[a-z]+=", text), "inline event handler"
    assert "<style" not in text
    for script in re.findall(r"<script\b[^>]*>", text):
        # Scripts come from /static; a JSON data block is data, not code.
        assert 'src="/static/' in script or 'type="application/json"' in script, script
