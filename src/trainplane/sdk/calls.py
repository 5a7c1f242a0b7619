"""Every server operation the SDK calls (:data:`OPERATIONS`), and one function
per client method that turns its arguments into a ``Call``. ``Client`` and
``AsyncClient`` only send these, so the two cannot disagree.

Left out on purpose: the runtime's own endpoints, authenticated by an attempt
token rather than a user's (:data:`RUNTIME_ONLY`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, Literal, TypedDict

import httpx

from trainplane.sdk import installation_models as im
from trainplane.sdk import models as m
from trainplane.sdk.specs import SpecInput, spec_document
from trainplane.sdk.transport import Call, Operation

SUBMIT = Operation("POST", "/v1/jobs", m.Job)
LIST_JOBS = Operation("GET", "/v1/jobs", m.Page[m.JobSummary])
PLAN = Operation("POST", "/v1/jobs/plan", m.Plan)
COMPARE = Operation("GET", "/v1/jobs/compare", m.Comparison)
GET_JOB = Operation("GET", "/v1/jobs/{job_id}", m.Job)
CANCEL = Operation("POST", "/v1/jobs/{job_id}/cancel", m.Job)
EVENTS = Operation("GET", "/v1/jobs/{job_id}/events", m.AfterPage[m.Event])
LOGS = Operation("GET", "/v1/jobs/{job_id}/logs", str)
METRICS = Operation("GET", "/v1/jobs/{job_id}/metrics", m.Metrics)
CHECKPOINTS = Operation("GET", "/v1/jobs/{job_id}/checkpoints", m.Checkpoints)
RESULT = Operation("GET", "/v1/jobs/{job_id}/result", m.JobResult)
TRIALS = Operation("GET", "/v1/jobs/{job_id}/trials", m.Trials)
UPLOAD_BUNDLE = Operation("POST", "/v1/projects/{project}/bundles", m.Bundle)
GET_BUNDLE = Operation("GET", "/v1/projects/{project}/bundles/{digest}", m.Bundle)
PUT_INPUT = Operation("PUT", "/v1/projects/{project}/inputs/{digest}", m.InputFile)
GET_INPUT = Operation("GET", "/v1/projects/{project}/inputs/{digest}", m.InputFile)
LIST_CLUSTERS = Operation("GET", "/v1/clusters", im.ClusterList)
ADD_CLUSTER = Operation("POST", "/v1/clusters", im.Cluster)
PUT_CLUSTER = Operation("PUT", "/v1/clusters/{name}", im.Cluster)
REMOVE_CLUSTER = Operation("DELETE", "/v1/clusters/{name}", None)
LIST_PROJECTS = Operation("GET", "/v1/projects", im.ProjectList)
CREATE_PROJECT = Operation("POST", "/v1/projects", im.Project)
UPDATE_PROJECT = Operation("PATCH", "/v1/projects/{name}", im.Project)
SET_SECRET = Operation("PUT", "/v1/projects/{name}/secrets/{key}", im.Secret)
LIST_SECRETS = Operation("GET", "/v1/projects/{name}/secrets", im.SecretList)
DELETE_SECRET = Operation("DELETE", "/v1/projects/{name}/secrets/{key}", None)
WHOAMI = Operation("GET", "/v1/whoami", im.WhoAmI)
LIST_TOKENS = Operation("GET", "/v1/tokens", im.TokenList)
CREATE_TOKEN = Operation("POST", "/v1/tokens", im.TokenCreated)
REVOKE_TOKEN = Operation("DELETE", "/v1/tokens/{token_id}", None)
AUDIT = Operation("GET", "/v1/audit", m.AfterPage[im.AuditEvent])
USAGE = Operation("GET", "/v1/usage", im.Usage)
LIST_MODELS = Operation("GET", "/v1/models", im.ModelPage)
HEALTH = Operation("GET", "/healthz", m.Health)
READY = Operation("GET", "/readyz", m.Health)
PROMETHEUS = Operation("GET", "/metrics", str)

# Every Operation above; tests/sdk checks each against the server's OpenAPI document.
OPERATIONS: tuple[Operation, ...] = tuple(
    value for value in list(globals().values()) if isinstance(value, Operation)
)

RUNTIME_ONLY = (
    ("POST", "/v1/jobs/{job_id}/attempts/{attempt_id}/progress"),
    ("PUT", "/v1/jobs/{job_id}/attempts/{attempt_id}/result"),
    ("GET", "/v1/jobs/{job_id}/attempts/{attempt_id}/secrets"),
)


# Options that methods of both clients take as keyword arguments: declared
# once here, so the two clients' signatures cannot drift apart.


class SpecOptions(TypedDict, total=False):
    project: str  # replaces the spec's own
    overrides: Iterable[str]  # key=value, as the CLI's --set (resources.gpus=4)


class SubmitOptions(SpecOptions, total=False):
    idempotency_key: str  # the same key again returns the same job


class JobFilters(TypedDict, total=False):
    status: str | Iterable[str]  # any of these
    project: str
    name: str
    parent: str  # a sweep's id: its trials


class ClusterOptions(TypedDict, total=False):
    accelerator: str  # cpu, H100, ... (default cpu)
    gpus_per_node: int  # default: gpus
    gpu_memory_gb: float
    price_per_gpu_hour: float
    labels: dict[str, str]


class ProjectChanges(TypedDict, total=False):
    """A field given as None removes that limit; ``weight`` cannot be None."""

    description: str | None
    max_gpus: int | None
    gpu_hours_per_month: float | None
    weight: float
    # The project's storage root (absolute path or s3://bucket/prefix); None:
    # the default. Installation admins only.
    storage: str | None


class TokenGrant(TypedDict, total=False):
    project: str | None  # None (the default): every project
    role: Literal["viewer", "member", "admin"]  # default member
    kind: Literal["user", "service"]  # default user
    expires_in: int | str  # seconds, or a duration such as 30d; default: never


class UsageWindow(TypedDict, total=False):
    since: datetime  # default: 30 days ago
    until: datetime  # default: now
    project: str


def submit(spec: SpecInput, options: SubmitOptions) -> Call[m.Job]:
    return submit_document(spec_of(spec, options), options.get("idempotency_key"))


def submit_document(document: dict[str, Any], key: str | None) -> Call[m.Job]:
    """The spec document as it is, options applied already (``spec_of``)."""
    headers = {"Idempotency-Key": key} if key else {}
    return SUBMIT.call(json=document, headers=headers)


def plan(spec: SpecInput, options: SpecOptions) -> Call[m.Plan]:
    return plan_document(spec_of(spec, options))


def plan_document(document: dict[str, Any]) -> Call[m.Plan]:
    return PLAN.call(json=document)


def spec_of(spec: SpecInput, options: SpecOptions) -> dict[str, Any]:
    """The document a spec input makes, with the options applied; raises
    ValueError for a file that cannot be read or an override that does not apply."""
    return spec_document(
        spec, project=options.get("project"), overrides=options.get("overrides", ())
    )


def list_jobs(
    filters: JobFilters, limit: int | None, cursor: str | None = None
) -> Call[m.Page[m.JobSummary]]:
    status = filters.get("status")
    statuses = [status] if isinstance(status, str) else list(status or [])
    params = {"status": statuses or None, "project": filters.get("project")}
    params.update(name=filters.get("name"), parent=filters.get("parent"))
    params.update(limit=limit, cursor=cursor)
    return LIST_JOBS.call(params=params)


def job(job_id: str) -> Call[m.Job]:
    return GET_JOB.call(job_id=job_id)


def job_model(job_id: str) -> Call[m.JobModel | None]:
    return GET_JOB.call(job_id=job_id, pick=lambda found: found.registered_model)


def trials(job_id: str) -> Call[m.Trials]:
    return TRIALS.call(job_id=job_id)


def cancel(job_id: str) -> Call[m.Job]:
    return CANCEL.call(job_id=job_id)


def events(job_id: str, page_size: int | None) -> Call[m.AfterPage[m.Event]]:
    return EVENTS.call(job_id=job_id, params={"limit": page_size})


def logs(job_id: str, attempt: int | None) -> Call[str]:
    return LOGS.call(job_id=job_id, params={"attempt": attempt})


def follow_logs(job_id: str) -> Call[str]:
    return LOGS.call(
        job_id=job_id, params={"follow": "true"}, headers={"Accept": "text/event-stream"}
    )


def metrics(job_id: str, page_size: int | None) -> Call[m.Metrics]:
    return METRICS.call(job_id=job_id, params={"limit": page_size})


def all_metrics(pages: Sequence[m.Metrics]) -> m.Metrics:
    """The pages of a job's metrics as one: every point, the latest progress."""
    points = [point for page in pages for point in page.points]
    return pages[-1].model_copy(update={"points": points, "next_cursor": None})


def checkpoints(job_id: str) -> Call[m.Checkpoints]:
    return CHECKPOINTS.call(job_id=job_id)


def compare(ids: Iterable[str]) -> Call[m.Comparison]:
    return COMPARE.call(params={"ids": ",".join(ids)})


def result(job_id: str) -> Call[m.JobResult]:
    return RESULT.call(job_id=job_id)


def upload_bundle(project: str, data: bytes) -> Call[m.Bundle]:
    headers = {"Content-Type": "application/zip"}
    return UPLOAD_BUNDLE.call(project=project, content=data, headers=headers)


def bundle(project: str, digest: str) -> Call[m.Bundle]:
    return GET_BUNDLE.call(project=project, digest=digest)


def bundle_if_any(project: str, digest: str) -> Call[m.Bundle | None]:
    """The project's bundle of that digest; None when it has none."""
    return GET_BUNDLE.call(project=project, digest=digest, none_if=frozenset({404}))


def input_file(project: str, digest: str) -> Call[m.InputFile]:
    return GET_INPUT.call(project=project, digest=digest)


def input_if_any(project: str, digest: str) -> Call[m.InputFile | None]:
    """The project's input of that digest; None when it has none."""
    return GET_INPUT.call(project=project, digest=digest, none_if=frozenset({404}))


# An upload's answer comes once the server has stored it all: unpacking a
# model folder, or sending it on to S3, takes a while.
UPLOAD_TIMEOUT = httpx.Timeout(30.0, read=3600.0)


def upload_input(
    project: str,
    digest: str,
    size_bytes: int,
    chunks: Callable[[], Iterator[bytes]],
    *,
    folder: bool,
    name: str | None = None,
) -> Call[m.InputFile]:
    """Store a file (``folder`` False: its bytes, kept as ``name``) or a
    folder (a zip of it) in the project's storage as ``digest``."""
    headers = {
        "Content-Type": "application/zip" if folder else "application/octet-stream",
        "Content-Length": str(size_bytes),
    }
    return PUT_INPUT.call(
        project=project,
        digest=digest,
        params={"name": None if folder else name},
        headers=headers,
        stream=chunks,
        timeout=UPLOAD_TIMEOUT,
    )


def clusters() -> Call[im.ClusterList]:
    return LIST_CLUSTERS.call()


def _cluster_body(name: str, address: str, gpus: int, options: ClusterOptions) -> dict[str, Any]:
    return {"name": name, "address": address, "gpus": gpus, **options}


def add_cluster(name: str, address: str, gpus: int, options: ClusterOptions) -> Call[im.Cluster]:
    return ADD_CLUSTER.call(json=_cluster_body(name, address, gpus, options))


def put_cluster(name: str, address: str, gpus: int, options: ClusterOptions) -> Call[im.Cluster]:
    return PUT_CLUSTER.call(name=name, json=_cluster_body(name, address, gpus, options))


def remove_cluster(name: str) -> Call[None]:
    return REMOVE_CLUSTER.call(name=name)


def projects() -> Call[list[im.Project]]:
    return LIST_PROJECTS.call(pick=lambda body: body.items)


def create_project(name: str, description: str) -> Call[im.Project]:
    return CREATE_PROJECT.call(json={"name": name, "description": description})


def update_project(name: str, changes: ProjectChanges) -> Call[im.Project]:
    return UPDATE_PROJECT.call(name=name, json=dict(changes))


def set_secret(project: str, key: str, value: str) -> Call[im.Secret]:
    return SET_SECRET.call(name=project, key=key, json={"value": value})


def secrets(project: str) -> Call[list[im.Secret]]:
    return LIST_SECRETS.call(name=project, pick=lambda body: body.items)


def delete_secret(project: str, key: str) -> Call[None]:
    return DELETE_SECRET.call(name=project, key=key)


def whoami() -> Call[im.WhoAmI]:
    return WHOAMI.call()


def tokens() -> Call[list[im.Token]]:
    return LIST_TOKENS.call(pick=lambda body: body.items)


def create_token(name: str, grant: TokenGrant) -> Call[im.TokenCreated]:
    return CREATE_TOKEN.call(json={"name": name, **grant})


def revoke_token(token_id: str) -> Call[None]:
    return REVOKE_TOKEN.call(token_id=token_id)


def audit(after: int | None, page_size: int | None) -> Call[m.AfterPage[im.AuditEvent]]:
    return AUDIT.call(params={"after": after, "limit": page_size})


def usage(window: UsageWindow) -> Call[im.Usage]:
    params = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in window.items()}
    return USAGE.call(params=params)


def list_models(limit: int | None, cursor: str | None) -> Call[im.ModelPage]:
    return LIST_MODELS.call(params={"limit": limit, "cursor": cursor})


def health() -> Call[m.Health]:
    return HEALTH.call()


def ready() -> Call[m.Health]:
    # Not ready is an answer too: its body says which check failed.
    return READY.call(also_ok=frozenset({503}))


def prometheus_metrics() -> Call[str]:
    return PROMETHEUS.call()
