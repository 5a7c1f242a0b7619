"""``trainplane tokens create NAME --admin``: an installation-wide admin token
made on the server's machine, in the database itself, with no server running
and no token in hand.

It is how an installation gets its first token without a bootstrap token,
and how an operator who lost every admin token gets back in: whoever can
reach the database (TRAINPLANE_DATABASE_URL, or the SQLite file under
TRAINPLANE_HOME) already holds everything, so this gives away nothing. The
audit trail records the operator and that the token came this way.
"""

from __future__ import annotations

import getpass
import socket

from sqlalchemy.exc import SQLAlchemyError

from trainplane.config import Settings
from trainplane.db.engine import make_engine, session_factory
from trainplane.errors import ServiceError
from trainplane.serve.processes import ServeError, prepare_database
from trainplane.services.tokens import NewToken, create_operator_admin


def operator() -> str:
    """Who runs this, as the audit trail names them."""
    try:
        user = getpass.getuser()
    except OSError:  # no user name for this uid (a container)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def create_admin_token(
    settings: Settings, *, name: str, expires_in_seconds: int | None = None
) -> NewToken:
    """Raises ServeError saying why when the database refuses."""
    try:
        prepare_database(settings)
        engine = make_engine(settings.resolved_database_url, single_use=True)
        try:
            with session_factory(engine)() as session:
                return create_operator_admin(
                    session, name=name, operator=operator(), expires_in_seconds=expires_in_seconds
                )
        finally:
            engine.dispose()
    except ServiceError as exc:
        raise ServeError(exc.detail) from None
    except SQLAlchemyError as exc:
        raise ServeError(
            f"cannot create the token in the database: {exc.__class__.__name__}: "
            f"{str(exc).splitlines()[0]} (is TRAINPLANE_DATABASE_URL this server's, "
            "and its schema upgraded with `trainplane db upgrade`?)"
        ) from None
