"""``/metrics``: Prometheus' text format. Open like the health probes unless
``TRAINPLANE_METRICS_TOKEN`` is set, in which case a scraper sends it as a
bearer token; either way, serve it where only your monitoring reaches: it
names projects and clusters. The token is not an API token: it opens this
one read-only page and nothing else."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from trainplane.api.deps import BearerTokenDep, SettingsDep
from trainplane.errors import UnauthenticatedError
from trainplane.observability.exposition import metrics_text

router = APIRouter(tags=["health"])


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
def metrics(request: Request, settings: SettingsDep, token: BearerTokenDep) -> Response:
    # A plain def: the queries run in the thread pool, off the event loop.
    expected = settings.metrics_token
    if expected is not None and not hmac.compare_digest(
        (token or "").encode(), expected.get_secret_value().encode()
    ):
        raise UnauthenticatedError(
            "/metrics needs the TRAINPLANE_METRICS_TOKEN as `Authorization: Bearer <token>`"
        )
    return Response(metrics_text(request.app.state.sessions), media_type=CONTENT_TYPE_LATEST)
