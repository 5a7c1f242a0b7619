"""The server verbs on a client-only install.

``pip install trainplane`` is the client (CLI and SDK). The verbs that run the
server side here (``server``, ``up``, ``scheduler``, ``db upgrade``, an admin
token written straight into the database) need the ``server`` extra; without it
they say how to install it instead of failing on an import deep inside."""

from __future__ import annotations

import importlib.util

from trainplane.cli.common import EXIT_USAGE, fail

# One module of each distribution the server side imports first.
SERVER_MODULES = ("fastapi", "uvicorn", "sqlalchemy", "alembic", "pydantic_settings", "mlflow")


def missing_server_modules() -> list[str]:
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


def require_server_extra(verb: str) -> None:
    """Exit with a usage error naming the install command when the server
    extra is not installed."""
    missing = missing_server_modules()
    if missing:
        raise fail(
            f"`trainplane {verb}` runs the server and needs its extra: "
            f"pip install 'trainplane[server]' (missing: {', '.join(missing)})",
            EXIT_USAGE,
        )
