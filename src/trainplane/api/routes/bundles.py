"""``/v1/projects/{project}/bundles``: upload a job's code as a zip, and look one up."""

from __future__ import annotations

from typing import Annotated

from anyio import to_thread
from fastapi import APIRouter, Path, Request, Response

from trainplane.api.deps import CallerDep, SessionDep
from trainplane.api.problems import BODY_RESPONSES, PROBLEM_RESPONSES, problem, problem_response
from trainplane.api.schemas.bundles import BundleOut
from trainplane.api.schemas.common import json_response
from trainplane.code_bundles import DIGEST_PATTERN, MAX_BUNDLE_BYTES
from trainplane.jobs.spec import ProjectName
from trainplane.services import bundles as bundle_service

router = APIRouter(prefix="/v1/projects", tags=["bundles"], responses=PROBLEM_RESPONSES)

ZIP_TYPES = ("application/zip", "application/octet-stream")
Digest = Annotated[str, Path(pattern=DIGEST_PATTERN, description="sha256:<64 hex>")]


@router.post(
    "/{project}/bundles",
    status_code=201,
    response_model=BundleOut,
    responses={
        200: {"model": BundleOut, "description": "The project already had these bytes"},
        415: problem_response("Not sent as application/zip"),
        **BODY_RESPONSES,
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}},
            "description": f"A zip of plain files, at most {MAX_BUNDLE_BYTES} bytes.",
        }
    },
)
async def upload_bundle(
    project: ProjectName, request: Request, session: SessionDep, caller: CallerDep
) -> Response:
    """Store a zip of a job's code; jobs of the project run it by naming the
    answer's digest in ``entrypoint.code``. The same bytes again answer 200."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type not in ZIP_TYPES:
        return problem(415, f"send the bundle as {ZIP_TYPES[0]}, not {media_type or 'nothing'}")
    data = await request.body()
    upload = await to_thread.run_sync(bundle_service.upload_bundle, session, caller, project, data)
    return json_response(
        BundleOut.from_view(upload.bundle),
        201 if upload.created else 200,
        {"Location": f"/v1/projects/{project}/bundles/{upload.bundle.digest}"},
    )


@router.get("/{project}/bundles/{digest}", response_model=BundleOut)
def get_bundle(
    project: ProjectName, digest: Digest, session: SessionDep, caller: CallerDep
) -> Response:
    """Whether the project has a bundle: a client skips uploading it again."""
    return json_response(
        BundleOut.from_view(bundle_service.get_bundle(session, caller, project, digest))
    )
