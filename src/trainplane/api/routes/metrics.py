"""``/metrics``: Prometheus' text format. Open like the health probes unless
``TRAINPLANE_METRICS_TOKEN`` is set, in which case a scraper sends it as a
bearer token; either way, serve it where only your monitoring reaches: it
names projects and clusters. The token is not an API token: it opens this
one read-only page and nothing else."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request, Response
from fastapi.security.utils import get_authorization_scheme_param
from prometheus_client import CONTENT_TYPE_LATEST

from trainplane.api.deps import SettingsDep
from trainplane.errors import UnauthenticatedError
from trainplane.observability.exposition import metrics_text

router = APIRouter(tags=["health"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {}}},
        401: {"description": "TRAINPLANE_METRICS_TOKEN is set and the request does not carry it"},
    },
)
def metrics(request: Request, settings: SettingsDep) -> Response:
    # A plain def: the queries run in the thread pool, off the event loop.
    expected = settings.metrics_token
    # Read by hand rather than through the API's bearer dependency: this is no
    # API credential, and the schema must not list /metrics as a secured route.
    scheme, token = get_authorization_scheme_param(request.headers.get("Authorization"))
    if scheme.lower() != "bearer":
        token = ""
    if expected is not None and not hmac.compare_digest(
        token.encode(), expected.get_secret_value().encode()
    ):
        raise UnauthenticatedError(
            "/metrics needs the TRAINPLANE_METRICS_TOKEN as `Authorization: Bearer <token>`"
        )
    return Response(metrics_text(request.app.state.sessions), media_type=CONTENT_TYPE_LATEST)
