"""``/metrics``: Prometheus' text format, unauthenticated like the health
probes. Serve it on an address only your monitoring reaches: it names
projects and clusters."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from trainplane.observability.exposition import metrics_text

router = APIRouter(tags=["health"])


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
def metrics(request: Request) -> Response:
    # A plain def: the queries run in the thread pool, off the event loop.
    return Response(metrics_text(request.app.state.sessions), media_type=CONTENT_TYPE_LATEST)
