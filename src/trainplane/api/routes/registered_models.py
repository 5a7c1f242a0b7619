"""``/v1/models``: the models jobs registered in MLflow, with the job of each version."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from trainplane.api.deps import CallerDep, SessionDep
from trainplane.api.problems import PROBLEM_RESPONSES
from trainplane.api.schemas.common import json_response
from trainplane.api.schemas.registered_models import ModelList
from trainplane.jobs.spec import ModelName
from trainplane.services import registered_models as model_service

router = APIRouter(prefix="/v1/models", tags=["models"], responses=PROBLEM_RESPONSES)

DEFAULT_PAGE = 50
MAX_PAGE = 200


@router.get("", response_model=ModelList)
def list_models(
    request: Request,
    session: SessionDep,
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Models per page.")] = DEFAULT_PAGE,
    cursor: Annotated[ModelName | None, Query(description="A next_cursor from before.")] = None,
) -> Response:
    """Registered models by name, each with its versions (newest first) and the
    trainplane job that produced each."""
    page = model_service.list_models(
        session, caller, request.app.state.mlflow, limit=limit, after=cursor
    )
    return json_response(ModelList.from_page(page))
