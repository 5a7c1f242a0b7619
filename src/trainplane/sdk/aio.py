"""``trainplane.AsyncClient``: ``Client``'s methods as coroutines, for asyncio
programs. The requests and their decoding are the same (``sdk.calls``); only
the sending differs. Lists that page, and followed logs, are ``async for``."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any, TypeVar, Unpack

from trainplane.sdk import calls
from trainplane.sdk import installation_models as im
from trainplane.sdk import models as m
from trainplane.sdk.errors import ConnectionFailed
from trainplane.sdk.sessions import AsyncSession
from trainplane.sdk.specs import SpecInput
from trainplane.sdk.sse import LogStream
from trainplane.sdk.transport import DEFAULT_TIMEOUT, STREAM_TIMEOUT, Call, connection
from trainplane.sdk.uploads import prepare, run_steps_async
from trainplane.sdk.waiting import Waiter, WaitOptions

T = TypeVar("T")
log = logging.getLogger("trainplane.sdk")


class AsyncClient:
    """As ``Client``, with ``await`` (and ``async with``); see its methods'
    documentation. ``wait``'s ``on_progress`` may be a coroutine function."""

    def __init__(
        self, url: str | None = None, token: str | None = None, *, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self._session = AsyncSession(*connection(url, token), timeout=timeout)
        self.url = self._session.url

    async def close(self) -> None:
        await self._session.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, call: Call[T]) -> T:
        return await self._session.run(call)

    async def _pages(self, call: Call[T]) -> AsyncIterator[T]:
        following: Call[T] | None = call
        while following is not None:
            page = await self._run(following)
            yield page
            following = following.next(page)

    # --- jobs ------------------------------------------------------------------

    async def submit(
        self,
        spec: SpecInput,
        *,
        upload: bool | None = None,
        **options: Unpack[calls.SubmitOptions],
    ) -> m.Job:
        """As ``Client.submit``; files are read and hashed off the event loop."""
        document = await self._prepared(spec, options, upload)
        return await self._run(calls.submit_document(document, options.get("idempotency_key")))

    async def plan(
        self, spec: SpecInput, *, upload: bool | None = None, **options: Unpack[calls.SpecOptions]
    ) -> m.Plan:
        return await self._run(calls.plan_document(await self._prepared(spec, options, upload)))

    async def _prepared(
        self, spec: SpecInput, options: calls.SpecOptions, upload: bool | None
    ) -> dict[str, Any]:
        document = await asyncio.to_thread(calls.spec_of, spec, options)
        steps = prepare(document, url=self.url, upload=upload, note=log.info)
        return await run_steps_async(steps, self._run)

    async def list_jobs(
        self,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        **filters: Unpack[calls.JobFilters],
    ) -> m.Page[m.JobSummary]:
        return await self._run(calls.list_jobs(filters, limit, cursor))

    async def jobs(
        self, *, page_size: int | None = None, **filters: Unpack[calls.JobFilters]
    ) -> AsyncIterator[m.JobSummary]:
        async for page in self._pages(calls.list_jobs(filters, page_size)):
            for job in page.items:
                yield job

    async def job(self, job_id: str) -> m.Job:
        return await self._run(calls.job(job_id))

    async def cancel(self, job_id: str) -> m.Job:
        return await self._run(calls.cancel(job_id))

    async def trials(self, job_id: str) -> m.Trials:
        return await self._run(calls.trials(job_id))

    async def wait(self, job_id: str, **options: Unpack[WaitOptions]) -> m.Job:
        waiter = Waiter(options)
        while True:
            job = await self.job(job_id)
            reported = waiter.report(job)
            if inspect.isawaitable(reported):
                await reported
            if job.is_terminal:
                return job
            await asyncio.sleep(waiter.pause(job))

    async def events(self, job_id: str, *, page_size: int | None = None) -> list[m.Event]:
        pages = self._pages(calls.events(job_id, page_size))
        return [event async for page in pages for event in page.items]

    async def logs(self, job_id: str, *, attempt: int | None = None) -> str:
        return await self._run(calls.logs(job_id, attempt))

    async def follow_logs(self, job_id: str) -> AsyncIterator[m.LogEvent]:
        call = calls.follow_logs(job_id)
        stream = LogStream()
        async with self._session.lines(**call.request(), timeout=STREAM_TIMEOUT) as lines:
            async for line in lines:
                event = stream.feed(line)
                if event is not None:
                    yield event
                if stream.ended:
                    return
        raise ConnectionFailed(self.url, "the log stream ended before the job did")

    async def metrics(self, job_id: str, *, page_size: int | None = None) -> m.Metrics:
        pages = [page async for page in self._pages(calls.metrics(job_id, page_size))]
        return calls.all_metrics(pages)

    async def checkpoints(self, job_id: str) -> m.Checkpoints:
        return await self._run(calls.checkpoints(job_id))

    async def compare(self, job_ids: Iterable[str]) -> m.Comparison:
        return await self._run(calls.compare(job_ids))

    async def model(self, job_id: str) -> m.JobModel | None:
        return await self._run(calls.job_model(job_id))

    async def result(self, job_id: str) -> m.JobResult:
        return await self._run(calls.result(job_id))

    # --- code bundles --------------------------------------------------------------

    async def upload_bundle(self, project: str, data: bytes) -> m.Bundle:
        return await self._run(calls.upload_bundle(project, data))

    async def bundle(self, project: str, digest: str) -> m.Bundle:
        return await self._run(calls.bundle(project, digest))

    async def input_file(self, project: str, digest: str) -> m.InputFile:
        return await self._run(calls.input_file(project, digest))

    # --- the installation ----------------------------------------------------------

    async def clusters(self) -> im.ClusterList:
        return await self._run(calls.clusters())

    async def add_cluster(
        self, name: str, address: str, *, gpus: int, **options: Unpack[calls.ClusterOptions]
    ) -> im.Cluster:
        return await self._run(calls.add_cluster(name, address, gpus, options))

    async def put_cluster(
        self, name: str, address: str, *, gpus: int, **options: Unpack[calls.ClusterOptions]
    ) -> im.Cluster:
        return await self._run(calls.put_cluster(name, address, gpus, options))

    async def remove_cluster(self, name: str) -> None:
        await self._run(calls.remove_cluster(name))

    async def projects(self) -> list[im.Project]:
        return await self._run(calls.projects())

    async def create_project(self, name: str, *, description: str = "") -> im.Project:
        return await self._run(calls.create_project(name, description))

    async def update_project(
        self, name: str, **changes: Unpack[calls.ProjectChanges]
    ) -> im.Project:
        return await self._run(calls.update_project(name, changes))

    async def set_secret(self, project: str, key: str, value: str) -> im.Secret:
        return await self._run(calls.set_secret(project, key, value))

    async def secrets(self, project: str) -> list[im.Secret]:
        return await self._run(calls.secrets(project))

    async def delete_secret(self, project: str, key: str) -> None:
        await self._run(calls.delete_secret(project, key))

    async def whoami(self) -> im.WhoAmI:
        return await self._run(calls.whoami())

    async def tokens(self) -> list[im.Token]:
        return await self._run(calls.tokens())

    async def create_token(self, name: str, **grant: Unpack[calls.TokenGrant]) -> im.TokenCreated:
        return await self._run(calls.create_token(name, grant))

    async def revoke_token(self, token_id: str) -> None:
        await self._run(calls.revoke_token(token_id))

    async def audit(
        self, *, after: int | None = None, page_size: int | None = None
    ) -> AsyncIterator[im.AuditEvent]:
        async for page in self._pages(calls.audit(after, page_size)):
            for event in page.items:
                yield event

    async def usage(self, **window: Unpack[calls.UsageWindow]) -> im.Usage:
        return await self._run(calls.usage(window))

    async def list_models(
        self, *, limit: int | None = None, cursor: str | None = None
    ) -> im.ModelPage:
        return await self._run(calls.list_models(limit, cursor))

    async def models(self, *, page_size: int | None = None) -> AsyncIterator[im.RegisteredModel]:
        async for page in self._pages(calls.list_models(page_size, None)):
            for model in page.items:
                yield model

    async def health(self) -> m.Health:
        return await self._run(calls.health())

    async def ready(self) -> m.Health:
        return await self._run(calls.ready())

    async def prometheus_metrics(self) -> str:
        return await self._run(calls.prometheus_metrics())
