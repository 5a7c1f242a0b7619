"""``trainplane.Client``: the HTTP API from Python, with typed answers.

Every operation of the server's OpenAPI document has a method here, except
the training runtime's own (``POST .../attempts/{id}/progress`` and
``PUT .../attempts/{id}/result``, which take an attempt token). The requests
are built in ``sdk.calls``, shared with ``AsyncClient``; keyword options
that several methods take are the TypedDicts there."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar, Unpack

from trainplane.sdk import calls
from trainplane.sdk import installation_models as im
from trainplane.sdk import models as m
from trainplane.sdk.errors import ConnectionFailed
from trainplane.sdk.sessions import Session
from trainplane.sdk.specs import SpecInput
from trainplane.sdk.sse import LogStream
from trainplane.sdk.transport import DEFAULT_TIMEOUT, STREAM_TIMEOUT, Call, connection
from trainplane.sdk.uploads import prepare, run_steps
from trainplane.sdk.waiting import Waiter, WaitOptions

T = TypeVar("T")
log = logging.getLogger("trainplane.sdk")


class Client:
    """A trainplane server at ``url`` (default ``TRAINPLANE_URL``, else
    http://127.0.0.1:8080), as ``token`` (default ``TRAINPLANE_TOKEN``).
    Refusals raise ``trainplane.TrainplaneError`` subclasses."""

    def __init__(
        self, url: str | None = None, token: str | None = None, *, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self._session = Session(*connection(url, token), timeout=timeout)
        self.url = self._session.url

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, call: Call[T]) -> T:
        return self._session.run(call)

    def _pages(self, call: Call[T]) -> Iterator[T]:
        following: Call[T] | None = call
        while following is not None:
            page = self._run(following)
            yield page
            following = following.next(page)

    # --- jobs ------------------------------------------------------------------

    def submit(
        self,
        spec: SpecInput,
        *,
        upload: bool | None = None,
        **options: Unpack[calls.SubmitOptions],
    ) -> m.Job:
        """Submit a spec: a mapping, a ``trainplane.jobs.spec`` model, or a
        YAML/JSON file's path (its relative paths resolve against its folder).

        The files it names on this machine go with it unless the server is
        ``trainplane up`` here: ``entrypoint.working_dir`` as a code bundle, a
        fine-tune's ``base_model`` and datasets to the project's storage, each
        only if the server does not have it yet. ``upload=True`` sends them to
        any server, ``upload=False`` sends their paths as they are (a server
        whose ``TRAINPLANE_SERVER_PATHS`` holds them). Raises ValueError
        (``LocalFilesError``, naming each field) before anything is sent."""
        document = self._prepared(spec, options, upload)
        return self._run(calls.submit_document(document, options.get("idempotency_key")))

    def plan(
        self, spec: SpecInput, *, upload: bool | None = None, **options: Unpack[calls.SpecOptions]
    ) -> m.Plan:
        """What submitting ``spec`` would do (placement, memory, cost); creates
        nothing but the uploads ``submit`` would make (which it then skips)."""
        return self._run(calls.plan_document(self._prepared(spec, options, upload)))

    def _prepared(
        self, spec: SpecInput, options: calls.SpecOptions, upload: bool | None
    ) -> dict[str, Any]:
        steps = prepare(calls.spec_of(spec, options), url=self.url, upload=upload, note=log.info)
        return run_steps(steps, self._run)

    def list_jobs(
        self,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        **filters: Unpack[calls.JobFilters],
    ) -> m.Page[m.JobSummary]:
        """One page of jobs, newest first; pass its ``next_cursor`` as ``cursor``."""
        return self._run(calls.list_jobs(filters, limit, cursor))

    def jobs(
        self, *, page_size: int | None = None, **filters: Unpack[calls.JobFilters]
    ) -> Iterator[m.JobSummary]:
        """Every matching job, newest first, fetched a page at a time."""
        for page in self._pages(calls.list_jobs(filters, page_size)):
            yield from page.items

    def job(self, job_id: str) -> m.Job:
        return self._run(calls.job(job_id))

    def cancel(self, job_id: str) -> m.Job:
        return self._run(calls.cancel(job_id))

    def trials(self, job_id: str) -> m.Trials:
        """A sweep's trials (parameters, status, objective values) and its best trial."""
        return self._run(calls.trials(job_id))

    def wait(self, job_id: str, **options: Unpack[WaitOptions]) -> m.Job:
        """The job once it has ended, however it ended (see ``Job.raise_for_status``).
        ``on_progress(job)`` hears of each change of status, reason or step.
        Raises ``WaitTimeout`` (a TimeoutError) after ``timeout`` seconds."""
        waiter = Waiter(options)
        while True:
            job = self.job(job_id)
            waiter.report(job)
            if job.is_terminal:
                return job
            time.sleep(waiter.pause(job))

    def events(self, job_id: str, *, page_size: int | None = None) -> list[m.Event]:
        """The job's status changes, oldest first."""
        return [e for page in self._pages(calls.events(job_id, page_size)) for e in page.items]

    def logs(self, job_id: str, *, attempt: int | None = None) -> str:
        """One attempt's log (default: the latest)."""
        return self._run(calls.logs(job_id, attempt))

    def follow_logs(self, job_id: str) -> Iterator[m.LogEvent]:
        """Every attempt's log, live, until the job ends: ``status``,
        ``attempt`` and ``log`` events, then one ``end`` event."""
        call = calls.follow_logs(job_id)
        stream = LogStream()
        with self._session.lines(**call.request(), timeout=STREAM_TIMEOUT) as lines:
            for line in lines:
                event = stream.feed(line)
                if event is not None:
                    yield event
                if stream.ended:
                    return
        raise ConnectionFailed(self.url, "the log stream ended before the job did")

    def metrics(self, job_id: str, *, page_size: int | None = None) -> m.Metrics:
        """The latest attempt's progress and all the job's metric points."""
        return calls.all_metrics(list(self._pages(calls.metrics(job_id, page_size))))

    def checkpoints(self, job_id: str) -> m.Checkpoints:
        return self._run(calls.checkpoints(job_id))

    def compare(self, job_ids: Iterable[str]) -> m.Comparison:
        """Two to twenty jobs' differing spec fields and final metrics."""
        return self._run(calls.compare(job_ids))

    def model(self, job_id: str) -> m.JobModel | None:
        """The model version the job registered; None until it has."""
        return self._run(calls.job_model(job_id))

    def result(self, job_id: str) -> m.JobResult:
        """What the job's function returned or raised, still pickled; NotFound until then."""
        return self._run(calls.result(job_id))

    # --- code bundles --------------------------------------------------------------

    def upload_bundle(self, project: str, data: bytes) -> m.Bundle:
        """Store a zip of a job's code; name its ``digest`` in ``entrypoint.code``."""
        return self._run(calls.upload_bundle(project, data))

    def bundle(self, project: str, digest: str) -> m.Bundle:
        """The project's bundle of that digest; NotFound if it has none."""
        return self._run(calls.bundle(project, digest))

    def input_file(self, project: str, digest: str) -> m.InputFile:
        """The project's uploaded input of that digest; NotFound if it has none."""
        return self._run(calls.input_file(project, digest))

    # --- the installation ----------------------------------------------------------

    def clusters(self) -> im.ClusterList:
        return self._run(calls.clusters())

    def add_cluster(
        self, name: str, address: str, *, gpus: int, **options: Unpack[calls.ClusterOptions]
    ) -> im.Cluster:
        """Register a Ray cluster by its dashboard address; Conflict if the name is taken."""
        return self._run(calls.add_cluster(name, address, gpus, options))

    def put_cluster(
        self, name: str, address: str, *, gpus: int, **options: Unpack[calls.ClusterOptions]
    ) -> im.Cluster:
        """Register the cluster, or update it to these fields: safe to repeat."""
        return self._run(calls.put_cluster(name, address, gpus, options))

    def remove_cluster(self, name: str) -> None:
        self._run(calls.remove_cluster(name))

    def projects(self) -> list[im.Project]:
        return self._run(calls.projects())

    def create_project(self, name: str, *, description: str = "") -> im.Project:
        return self._run(calls.create_project(name, description))

    def update_project(self, name: str, **changes: Unpack[calls.ProjectChanges]) -> im.Project:
        """Change the description, quotas, fair-share weight or storage root."""
        return self._run(calls.update_project(name, changes))

    def set_secret(self, project: str, key: str, value: str) -> im.Secret:
        """Create or replace a project secret (project admins). Jobs of the
        project name it in ``entrypoint.secrets``; no answer shows it again."""
        return self._run(calls.set_secret(project, key, value))

    def secrets(self, project: str) -> list[im.Secret]:
        """The project's secret keys and who set them when; never a value."""
        return self._run(calls.secrets(project))

    def delete_secret(self, project: str, key: str) -> None:
        self._run(calls.delete_secret(project, key))

    def whoami(self) -> im.WhoAmI:
        return self._run(calls.whoami())

    def tokens(self) -> list[im.Token]:
        return self._run(calls.tokens())

    def create_token(self, name: str, **grant: Unpack[calls.TokenGrant]) -> im.TokenCreated:
        """A token with a role in a project (or every project); its
        ``secret`` is in this answer only."""
        return self._run(calls.create_token(name, grant))

    def revoke_token(self, token_id: str) -> None:
        self._run(calls.revoke_token(token_id))

    def audit(
        self, *, after: int | None = None, page_size: int | None = None
    ) -> Iterator[im.AuditEvent]:
        """Who created, changed and removed what, oldest first."""
        for page in self._pages(calls.audit(after, page_size)):
            yield from page.items

    def usage(self, **window: Unpack[calls.UsageWindow]) -> im.Usage:
        """GPU-hours and cost by project, experiment, job and day."""
        return self._run(calls.usage(window))

    def list_models(self, *, limit: int | None = None, cursor: str | None = None) -> im.ModelPage:
        return self._run(calls.list_models(limit, cursor))

    def models(self, *, page_size: int | None = None) -> Iterator[im.RegisteredModel]:
        """Every registered model, by name, with its versions."""
        for page in self._pages(calls.list_models(page_size, None)):
            yield from page.items

    def health(self) -> m.Health:
        return self._run(calls.health())

    def ready(self) -> m.Health:
        """Whether the database answers with the expected schema (``status`` ok)."""
        return self._run(calls.ready())

    def prometheus_metrics(self) -> str:
        return self._run(calls.prometheus_metrics())
