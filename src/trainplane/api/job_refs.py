"""``JobIdDep``: the ``{job_id}`` of a ``/v1/jobs/{job_id}...`` route as a job
id, whether the caller wrote the id, a unique id prefix or a job name
(``services.job_refs``; ``?project=`` narrows a name to one project). Routes
then load the job by that id as before, scoped to the caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from trainplane.api.deps import CallerDep
from trainplane.jobs.spec import ProjectName
from trainplane.services.access import Caller
from trainplane.services.job_refs import is_full_id, resolve_job_ref


def _resolve(request: Request, caller: Caller, ref: str, project: str | None) -> str:
    with request.app.state.sessions() as session:
        return resolve_job_ref(session, caller, ref, project=project)


async def resolved_job_id(
    request: Request,
    job_id: str,
    caller: CallerDep,
    project: Annotated[
        ProjectName | None,
        Query(description="With a job name for {job_id}: the project to look for it in."),
    ] = None,
) -> str:
    # A whole id needs no lookup (the route's own query scopes it to the
    # caller), and no hop to the thread pool.
    if project is None and is_full_id(job_id):
        return job_id
    return await run_in_threadpool(_resolve, request, caller, job_id, project)


JobIdDep = Annotated[str, Depends(resolved_job_id)]
