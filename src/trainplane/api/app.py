"""Builds the FastAPI application from Settings (``create_app``)."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trainplane import __version__
from trainplane.api import nul_text, problems
from trainplane.api.authentication import Authentication
from trainplane.api.routes import (
    bundles,
    checkpoints,
    clusters,
    health,
    inputs,
    jobs,
    metrics,
    progress,
    projects,
    registered_models,
    results,
    secrets,
    sweeps,
    tokens,
    usage,
)
from trainplane.api.security_headers import SecurityHeaders
from trainplane.api.yaml_bodies import YamlBodies
from trainplane.backends.ray import RayClusters
from trainplane.code_bundles import MAX_BUNDLE_BYTES
from trainplane.config import Settings
from trainplane.dashboard import pages as dashboard_pages
from trainplane.dashboard.static_files import STATIC_PATH, static_files
from trainplane.db import migrate
from trainplane.db.engine import engine_from_settings, session_factory
from trainplane.jobs.results import MAX_REPORT_BYTES
from trainplane.observability.http_metrics import RequestTimer
from trainplane.services import tokens as token_service
from trainplane.services.attempt_tokens import TokenKey
from trainplane.services.file_access import FileAccess
from trainplane.services.progress import progress_rate_limit
from trainplane.tracking.client import MlflowTracking, tracking_config

log = logging.getLogger(__name__)

# Specs are small; anything bigger is a mistake or an attack.
MAX_BODY_BYTES = 1 << 20
# A progress report of 1000 points with dozens of metrics each runs to a few MiB.
MAX_PROGRESS_BODY_BYTES = 8 << 20
_PROGRESS_PATH = re.compile(r"^/v1/jobs/[^/]+/attempts/[^/]+/progress$")
_RESULT_PATH = re.compile(r"^/v1/jobs/[^/]+/attempts/[^/]+/result$")
_BUNDLE_PATH = re.compile(r"^/v1/projects/[^/]+/bundles$")
_INPUT_PATH = re.compile(r"^/v1/projects/[^/]+/inputs/[^/]+$")


class BodySizeLimit:
    """Refuses bodies over ``max_bytes`` (or the limit of a path in ``larger``)
    before they are read: by their Content-Length, or, for chunked uploads, as
    soon as the count passes it."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        larger: tuple[tuple[re.Pattern[str], int], ...] = (),
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.larger = larger

    def limit_for(self, path: str) -> int:
        return next(
            (limit for pattern, limit in self.larger if pattern.match(path)), self.max_bytes
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        detail = f"request body over {limit} bytes"
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await problems.problem(413, detail)(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                # An HTTPException passes through the body parser untouched and
                # becomes a problem response like any other.
                raise HTTPException(413, detail)
            return message

        await self.app(scope, counting_receive, send)


def create_local_user_app() -> FastAPI:
    """The app of ``trainplane up`` on loopback: its one local user's specs
    may name their own files (DESIGN.md "Trust boundaries")."""
    return create_app(local_user=True)


def create_app(settings: Settings | None = None, *, local_user: bool = False) -> FastAPI:
    settings = settings or Settings()
    database_url = settings.resolved_database_url
    if settings.should_auto_migrate:
        migrate.upgrade(database_url)
    engine = engine_from_settings(settings)

    if settings.bootstrap_token is not None:
        with session_factory(engine)() as session:
            if token_service.bootstrap(session, settings.bootstrap_token.get_secret_value()):
                log.info("TRAINPLANE_BOOTSTRAP_TOKEN is now an admin token of every project")

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        engine.dispose()

    app = FastAPI(
        title="trainplane",
        version=__version__,
        description="Multi-GPU training and fine-tune jobs on Ray clusters.",
        lifespan=lifespan,
        dependencies=[Depends(nul_text.refuse_nul_text)],
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessions = session_factory(engine)
    app.state.schema_heads = migrate.head_revisions(database_url)
    app.state.ray_clusters = RayClusters()
    app.state.token_key = TokenKey(settings.secret_key)
    app.state.progress_rate_limit = progress_rate_limit()
    app.state.file_access = FileAccess.from_settings(settings, local_user=local_user)
    app.state.mlflow = MlflowTracking(tracking_config(settings))

    problems.install(app)

    # Innermost: YAML is parsed only once the caller is known.
    app.add_middleware(YamlBodies)
    # Inside the size limit, outside anything that reads a body.
    app.add_middleware(Authentication, sessions=app.state.sessions)
    app.add_middleware(
        BodySizeLimit,
        max_bytes=MAX_BODY_BYTES,
        larger=(
            (_PROGRESS_PATH, MAX_PROGRESS_BODY_BYTES),
            (_RESULT_PATH, MAX_REPORT_BYTES),
            (_BUNDLE_PATH, MAX_BUNDLE_BYTES),
            (_INPUT_PATH, settings.max_input_bytes),
        ),
    )
    # The time includes refusals by the size limit and authentication.
    app.add_middleware(RequestTimer)
    # Outermost: every answer carries them, refusals included.
    app.add_middleware(SecurityHeaders)
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(projects.router)
    app.include_router(jobs.router)
    app.include_router(progress.router)
    app.include_router(results.router)
    app.include_router(sweeps.router)
    app.include_router(secrets.router)
    app.include_router(bundles.router)
    app.include_router(inputs.router)
    app.include_router(checkpoints.router)
    app.include_router(clusters.router)
    app.include_router(registered_models.router)
    app.include_router(usage.router)
    app.include_router(tokens.router)
    app.include_router(dashboard_pages.router)
    app.mount(STATIC_PATH, static_files(), name="static")
    return app
