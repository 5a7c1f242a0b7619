"""``/v1/clusters``: the Ray clusters jobs are placed on."""

from __future__ import annotations

from fastapi import APIRouter, Response

from trainplane.api.deps import CallerDep, SessionDep
from trainplane.api.problems import BODY_RESPONSES, PROBLEM_RESPONSES
from trainplane.api.schemas.clusters import ClusterCreate, ClusterList, ClusterOut
from trainplane.api.schemas.common import json_response
from trainplane.errors import InvalidInputError
from trainplane.services import clusters as cluster_service
from trainplane.services.clusters import ClusterView

router = APIRouter(prefix="/v1/clusters", tags=["clusters"], responses=PROBLEM_RESPONSES)


@router.post("", status_code=201, response_model=ClusterOut, responses=BODY_RESPONSES)
def register_cluster(body: ClusterCreate, session: SessionDep, caller: CallerDep) -> Response:
    cluster = cluster_service.register_cluster(session, caller, **body.model_dump())
    return json_response(ClusterOut.from_view(ClusterView(cluster, 0, 0)), 201)


@router.put(
    "/{name}",
    response_model=ClusterOut,
    responses={201: {"model": ClusterOut, "description": "Registered now."}, **BODY_RESPONSES},
)
def apply_cluster(
    name: str, body: ClusterCreate, session: SessionDep, caller: CallerDep
) -> Response:
    """Register the cluster, or update it to this body: safe to repeat."""
    if body.name != name:
        raise InvalidInputError("name", f"'{body.name}' differs from the path's '{name}'")
    cluster, created = cluster_service.apply_cluster(session, caller, **body.model_dump())
    views = {v.cluster.id: v for v in cluster_service.list_clusters(session, caller)}
    view = views.get(cluster.id, ClusterView(cluster, 0, 0))
    return json_response(ClusterOut.from_view(view), 201 if created else 200)


@router.get("", response_model=ClusterList)
def list_clusters(session: SessionDep, caller: CallerDep) -> Response:
    views = cluster_service.list_clusters(session, caller)
    demand = cluster_service.total_queued_demand(session)
    return json_response(
        ClusterList(
            items=[ClusterOut.from_view(v) for v in views],
            queued_jobs=demand.jobs,
            queued_gpus=demand.gpus,
        )
    )


@router.delete("/{name}", status_code=204)
def remove_cluster(name: str, session: SessionDep, caller: CallerDep) -> Response:
    cluster_service.remove_cluster(session, caller, name)
    return Response(status_code=204)
