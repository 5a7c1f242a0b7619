"""Project secrets: ``/v1/projects/{name}/secrets`` for people (set, list,
delete; values are write-only), and ``/v1/jobs/{id}/attempts/{aid}/secrets``
for an attempt's runtime, which puts them in its processes' environment."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from trainplane.api.deps import BearerTokenDep, CallerDep, SessionDep, TokenKeyDep
from trainplane.api.problems import BODY_RESPONSES, PROBLEM_RESPONSES, problem_response
from trainplane.api.schemas.common import json_response
from trainplane.api.schemas.secrets import AttemptSecretsOut, SecretList, SecretOut, SecretSet
from trainplane.jobs.environment import SECRET_KEY_PATTERN
from trainplane.jobs.spec import ProjectName
from trainplane.services import secrets as secret_service

router = APIRouter(tags=["secrets"], responses=PROBLEM_RESPONSES)

SecretKeyPath = Annotated[
    str,
    Path(
        pattern=SECRET_KEY_PATTERN,
        description="Lowercase letters, digits, '.', '_' and '-'; 1-128 characters.",
    ),
]
# Nothing on the way may keep a copy of an answer that carries a value.
NO_STORE = {"Cache-Control": "no-store"}


@router.put(
    "/v1/projects/{name}/secrets/{key}",
    status_code=201,
    response_model=SecretOut,
    responses={
        200: {"model": SecretOut, "description": "The secret was replaced"},
        **BODY_RESPONSES,
    },
)
def set_secret(
    name: ProjectName,
    key: SecretKeyPath,
    body: SecretSet,
    session: SessionDep,
    caller: CallerDep,
    server_key: TokenKeyDep,
) -> Response:
    """Create or replace a secret (project admins). The value is stored
    encrypted and never shown again; jobs name it in ``entrypoint.secrets``."""
    info, created = secret_service.set_secret(session, caller, server_key, name, key, body.value)
    return json_response(SecretOut.from_info(info), 201 if created else 200)


@router.get("/v1/projects/{name}/secrets", response_model=SecretList)
def list_secrets(name: ProjectName, session: SessionDep, caller: CallerDep) -> Response:
    """The project's secret keys, and who set each when (members); no values."""
    infos = secret_service.list_secrets(session, caller, name)
    return json_response(SecretList(items=[SecretOut.from_info(i) for i in infos]))


@router.delete("/v1/projects/{name}/secrets/{key}", status_code=204)
def delete_secret(
    name: ProjectName, key: SecretKeyPath, session: SessionDep, caller: CallerDep
) -> Response:
    """Delete a secret (project admins). A queued job that names it fails at
    launch, saying which secret is missing."""
    secret_service.delete_secret(session, caller, name, key)
    return Response(status_code=204)


@router.get(
    "/v1/jobs/{job_id}/attempts/{attempt_id}/secrets",
    response_model=AttemptSecretsOut,
    tags=["jobs"],
    responses={401: problem_response("Missing or wrong attempt token")},
)
def attempt_secrets(
    job_id: str,
    attempt_id: str,
    session: SessionDep,
    server_key: TokenKeyDep,
    token: BearerTokenDep,
) -> Response:
    """For the attempt's runtime, with its attempt token, while the attempt is
    live: the values of its ``entrypoint.secrets``. 409 names a secret that was
    deleted since the job was submitted."""
    env = secret_service.attempt_secrets(
        session, server_key, job_id=job_id, attempt_id=attempt_id, token=token
    )
    return json_response(AttemptSecretsOut(env=env), headers=NO_STORE)
