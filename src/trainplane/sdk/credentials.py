"""Which token a client (the CLI, the SDK) sends: ``--token`` /
``TRAINPLANE_TOKEN``, or else, for a server on this machine, the local admin
token ``trainplane up`` wrote to ``$TRAINPLANE_HOME/token``, so a single user
never deals with auth. The SDK's; the CLI, built on the SDK, uses it too."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
TOKEN_FILE = "token"


def local_token_path() -> Path:
    home = os.environ.get("TRAINPLANE_HOME")
    return (Path(home) if home else Path.home() / ".trainplane") / TOKEN_FILE


def token_for(url: str, given: str | None) -> str | None:
    if given:
        return given
    if (urlsplit(url).hostname or "") not in LOOPBACK:
        return None  # the local token never leaves this machine
    try:
        return local_token_path().read_text().strip() or None
    except OSError:
        return None
