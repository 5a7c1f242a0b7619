"""Runtime fixtures live in tests/conftest.py (moto's S3 server and the
one-rank process group are shared with the tracking tests); here: a stand-in
control plane's setup, for the tests of what a runtime sends it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from trainplane.runtime import env as tp_env


@contextlib.contextmanager
def control_plane_at(server: ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``server`` answering on 127.0.0.1 as the control plane of attempt
    ``attempt`` of job ``job`` (token ``token``), as a runtime's environment
    says; yields its URL."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv(tp_env.CONTROL_PLANE_URL, url)
    monkeypatch.setenv(tp_env.JOB_ID, "job")
    monkeypatch.setenv(tp_env.ATTEMPT_ID, "attempt")
    monkeypatch.setenv(tp_env.ATTEMPT_TOKEN, "token")
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()
