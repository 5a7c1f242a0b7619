"""Whether a server may listen where it was asked to, and the warnings of
one that listens unprotected.

An installation without tokens treats every caller as its admin: fine for
one user on their own machine (loopback), an open door anywhere else. So a
server on any other address refuses to start until the installation has a
token or ``TRAINPLANE_BOOTSTRAP_TOKEN`` names one, unless its operator says
``--insecure-no-auth``; then it warns every minute until a token exists.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
import threading
from collections.abc import Iterator

from trainplane.config import Settings
from trainplane.db.engine import make_engine, session_factory
from trainplane.services import tokens

log = logging.getLogger("trainplane")

INSECURE_WARNING_SECONDS = 60.0
INSECURE_FLAG = "--insecure-no-auth"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) reaches only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(found) and all(ipaddress.ip_address(f[4][0]).is_loopback for f in found)


def has_auth(settings: Settings) -> bool:
    """Whether requests will need a token: the installation has one, or the
    bootstrap token is about to become its first."""
    if settings.bootstrap_token is not None:
        return True
    engine = make_engine(settings.resolved_database_url, single_use=True)
    try:
        with session_factory(engine)() as session:
            return tokens.auth_enabled(session)
    finally:
        engine.dispose()


def refusal_to_listen(settings: Settings, host: str, *, insecure_no_auth: bool) -> str | None:
    """Why a server may not listen on ``host`` as things stand; None when it may."""
    if is_loopback(host) or insecure_no_auth or has_auth(settings):
        return None
    return (
        f"refusing to listen on {host}: this installation has no API token yet, so anyone "
        "who can reach it would be its admin. Set TRAINPLANE_BOOTSTRAP_TOKEN to an admin "
        "token of your choosing (16 characters or more), or create one on this machine with "
        "`trainplane tokens create NAME --admin`; or listen on 127.0.0.1. "
        f"{INSECURE_FLAG} starts it anyway."
    )


def insecure_warning(host: str) -> str:
    return (
        f"listening on {host} WITHOUT AUTHENTICATION ({INSECURE_FLAG}): anyone who can reach "
        "this server is an installation admin. Create a token with `trainplane tokens "
        "create NAME --admin` to turn authentication on."
    )


@contextlib.contextmanager
def warning_while_open(
    settings: Settings, host: str, every: float = INSECURE_WARNING_SECONDS
) -> Iterator[threading.Thread | None]:
    """Logs :func:`insecure_warning` now and every ``every`` seconds while
    the block runs and the installation has no token."""
    if is_loopback(host) or has_auth(settings):
        yield None
        return
    stop = threading.Event()

    def warn() -> None:
        while not stop.is_set():
            if has_auth(settings):
                log.info("the installation has a token now: authentication is on")
                return
            log.warning(insecure_warning(host))
            stop.wait(every)

    thread = threading.Thread(target=warn, name="trainplane-insecure-warning", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        stop.set()
        thread.join(5)
