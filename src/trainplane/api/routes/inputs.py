"""``/v1/projects/{project}/inputs/{digest}``: a fine-tune's base model folder
or dataset uploaded to the project's storage, and whether one is there.

The body streams to storage; it is not read before the caller's role in the
project is known, and never when the project has the digest already. The
largest body an operator allows is ``TRAINPLANE_MAX_INPUT_BYTES``; a bigger
one is refused (413) by its Content-Length, before it is read."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, Field

from trainplane.api.deps import CallerDep, FileAccessDep, SessionDep, SettingsDep
from trainplane.api.problems import BODY_RESPONSES, PROBLEM_RESPONSES, problem, problem_response
from trainplane.api.schemas.common import json_response
from trainplane.code_bundles import DIGEST_PATTERN
from trainplane.jobs.spec import ProjectName
from trainplane.services import input_files
from trainplane.services.input_files import FILE_NAME_PATTERN

router = APIRouter(prefix="/v1/projects", tags=["inputs"], responses=PROBLEM_RESPONSES)

# What the body is: one file as it is, or a folder as a zip to unpack.
KINDS: dict[str, Literal["file", "folder"]] = {
    "application/octet-stream": "file",
    "application/zip": "folder",
}
Digest = Annotated[
    str, Path(pattern=DIGEST_PATTERN, description="sha256:<64 hex> of the body sent.")
]


class InputOut(BaseModel):
    digest: str
    project: str
    kind: Literal["file", "folder"]
    location: str = Field(
        description="Where it lies in the project's storage: name it in the spec "
        "(base_model, dataset.train, dataset.eval)."
    )
    size_bytes: int
    files: int


@router.put(
    "/{project}/inputs/{digest}",
    status_code=201,
    response_model=InputOut,
    responses={
        200: {"model": InputOut, "description": "The project had these bytes already"},
        415: problem_response("Neither application/octet-stream nor application/zip"),
        502: problem_response("The project's storage failed"),
        **BODY_RESPONSES,
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                "application/zip": {"schema": {"type": "string", "format": "binary"}},
            },
            "description": "One file (a dataset), or a zip of a folder (a Hugging Face "
            "model): regular files with relative names only.",
        }
    },
)
async def upload_input(
    project: ProjectName,
    digest: Digest,
    request: Request,
    session: SessionDep,
    caller: CallerDep,
    access: FileAccessDep,
    settings: SettingsDep,
    name: Annotated[
        str | None,
        Query(
            pattern=FILE_NAME_PATTERN,
            description="A file's name in storage (default `data`); not for a folder.",
        ),
    ] = None,
) -> Response:
    """Store a file or a folder in the project's storage under its digest,
    for a fine-tune spec to name by the answer's ``location``. Member role."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type not in KINDS:
        return problem(
            415,
            f"send a file as application/octet-stream or a folder as application/zip, "
            f"not {media_type or 'nothing'}",
        )
    upload = await input_files.upload_input(
        session,
        caller,
        access,
        project_name=project,
        digest=digest,
        kind=KINDS[media_type],
        name=name,
        body=request.stream(),
        max_bytes=settings.max_input_bytes,
    )
    return json_response(
        InputOut.model_validate(upload.input, from_attributes=True), 201 if upload.created else 200
    )


@router.get(
    "/{project}/inputs/{digest}",
    response_model=InputOut,
    responses={502: problem_response("The project's storage failed")},
)
def get_input(
    project: ProjectName,
    digest: Digest,
    session: SessionDep,
    caller: CallerDep,
    access: FileAccessDep,
) -> Response:
    """Whether the project has an input of this digest, and where: a client
    skips uploading it again."""
    view = input_files.get_input(session, caller, access, project, digest)
    return json_response(InputOut.model_validate(view, from_attributes=True))
