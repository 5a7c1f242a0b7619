"""``trainplane.AsyncClient`` against a real server: the same requests as
``Client`` (shared code), so a representative part, the async iteration
and the error mapping."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

import trainplane
from tests.fuzz.live_server import BOOTSTRAP_TOKEN
from tests.sdk.conftest import spec
from trainplane.code_bundles import bundle_of_folder
from trainplane.net import free_port
from trainplane.sdk.models import Job, JobStatus

T = TypeVar("T")


def run(test: Callable[[trainplane.AsyncClient], Awaitable[T]], url: str, token: Any) -> T:
    async def with_client() -> T:
        async with trainplane.AsyncClient(url, token) as client:
            return await test(client)

    return asyncio.run(with_client())


@pytest.fixture
def as_admin(live_server):
    return lambda test: run(test, live_server.url, BOOTSTRAP_TOKEN)


def test_submit_page_wait_and_follow(as_admin, project, live_server):
    name = f"async-{uuid.uuid4().hex[:8]}"
    seen: list[Job] = []

    async def report(job: Job) -> None:  # a coroutine function is awaited
        seen.append(job)

    async def scenario(client: trainplane.AsyncClient) -> dict[str, Any]:
        ids = [(await client.submit(spec(name, project))).id for _ in range(3)]
        key = uuid.uuid4().hex
        replayed = [
            (await client.submit(spec(name, project), idempotency_key=key)).id for _ in "ab"
        ]
        listed = [job.id async for job in client.jobs(project=project, name=name, page_size=2)]
        first = await client.list_jobs(project=project, name=name, limit=2)
        live_server.start_attempt(ids[0], log="hello")
        cancelled = await client.cancel(ids[0])
        return {
            "ids": ids + replayed[:1],
            "replayed": replayed,
            "listed": listed,
            "first": first,
            "job": await client.job(ids[1]),
            "cancelled": cancelled,
            "waited": await client.wait(ids[0], on_progress=report),
            "events": await client.events(ids[0]),
            "followed": [event async for event in client.follow_logs(ids[0])],
            "logs": await client.logs(ids[0]),
            "metrics": await client.metrics(ids[0]),
            "plan": await client.plan(spec(name, project)),
        }

    found = as_admin(scenario)

    assert found["replayed"][0] == found["replayed"][1]
    assert sorted(found["listed"]) == sorted(found["ids"]) and len(found["listed"]) == 4
    assert len(found["first"].items) == 2 and found["first"].next_cursor
    assert isinstance(found["job"], Job) and found["job"].status is JobStatus.QUEUED
    assert found["cancelled"].status is found["waited"].status is JobStatus.CANCELLED
    assert [j.status for j in seen] == [JobStatus.CANCELLED]
    assert [e.to_status for e in found["events"]] == [JobStatus.QUEUED, JobStatus.CANCELLED]
    assert [e.event for e in found["followed"]] == ["status", "attempt", "log", "end"]
    assert found["followed"][2].text == found["logs"] == "hello"
    assert found["metrics"].points == [] and found["plan"].valid


def test_the_installation(as_admin, project):
    cluster = f"async-{uuid.uuid4().hex[:8]}"

    async def scenario(client: trainplane.AsyncClient) -> dict[str, Any]:
        added = await client.add_cluster(cluster, "http://127.0.0.1:9", gpus=2)
        put = await client.put_cluster(cluster, "http://127.0.0.1:9", gpus=2, labels={"a": "b"})
        listed = await client.clusters()
        await client.remove_cluster(cluster)
        token = await client.create_token(f"ci-{cluster}", project=project, kind="service")
        tokens = await client.tokens()
        await client.revoke_token(token.id)
        return {
            "added": added,
            "put": put,
            "listed": {c.name for c in listed.items},
            "after": {c.name for c in (await client.clusters()).items},
            "token": token,
            "tokens": {t.id: t.status for t in tokens},
            "revoked": {t.id: t.status for t in await client.tokens()}[token.id],
            "whoami": await client.whoami(),
            "projects": {p.name for p in await client.projects()},
            "updated": await client.update_project(project, description="async"),
            "audit": [event.action async for event in client.audit(page_size=3)],
            "usage": await client.usage(project=project),
            "models": await client.list_models(),
            "all_models": [model async for model in client.models()],
            "health": await client.health(),
            "ready": await client.ready(),
            "prometheus": await client.prometheus_metrics(),
        }

    found = as_admin(scenario)

    assert found["added"].id == found["put"].id and found["put"].labels == {"a": "b"}
    assert cluster in found["listed"] and cluster not in found["after"]
    assert found["token"].kind == "service" and found["token"].secret
    assert found["tokens"][found["token"].id] == "active" and found["revoked"] == "revoked"
    assert found["whoami"].everywhere == "admin" and project in found["projects"]
    assert found["updated"].description == "async"
    assert {"cluster.register", "cluster.remove", "token.revoke"} <= set(found["audit"])
    assert found["usage"].total.jobs >= 0 and found["models"].items == found["all_models"]
    assert found["health"].status == found["ready"].status == "ok"
    assert "# TYPE" in found["prometheus"]


def test_refusals_map_to_their_errors(as_admin, project, live_server):
    async def failing(client: trainplane.AsyncClient) -> dict[str, Exception]:
        calls = {
            "missing": client.job("no-such-job"),
            "invalid": client.submit(spec("bad", project, resources={"gpus": 0})),
            "conflict": client.create_project(project),
            "no-result": client.result("no-such-job"),
            "no-bundle": client.bundle(project, "sha256:" + "1" * 64),
        }
        return {name: await _raised(call) for name, call in calls.items()}

    raised = as_admin(failing)
    unauthorized = run(lambda c: _raised(c.whoami()), live_server.url, "wrong-token")
    unreachable = run(lambda c: _raised(c.health()), f"http://127.0.0.1:{free_port()}", None)

    assert isinstance(raised["missing"], trainplane.NotFound)
    assert isinstance(raised["invalid"], trainplane.InvalidRequest)
    assert [e.field for e in raised["invalid"].errors] == ["resources.gpus"]
    assert isinstance(raised["conflict"], trainplane.Conflict)
    assert isinstance(raised["no-result"], trainplane.NotFound)
    assert isinstance(raised["no-bundle"], trainplane.NotFound)
    assert isinstance(unauthorized, trainplane.Unauthorized) and unauthorized.status == 401
    assert isinstance(unreachable, trainplane.ConnectionFailed)


async def _raised(call: Awaitable[Any]) -> Exception:
    try:
        await call
    except trainplane.TrainplaneError as exc:
        return exc
    raise AssertionError("the call succeeded")


def test_the_environment_names_the_server_and_token(live_server, monkeypatch):
    monkeypatch.setenv("TRAINPLANE_URL", live_server.url)
    monkeypatch.setenv("TRAINPLANE_TOKEN", BOOTSTRAP_TOKEN)

    async def whoami() -> str | None:
        async with trainplane.AsyncClient() as client:
            return (await client.whoami()).everywhere

    assert asyncio.run(whoami()) == "admin"


def test_submit_with_upload(as_admin, project, tmp_path):
    (tmp_path / "train.py").write_text(f"print({uuid.uuid4().int})\n")
    entrypoint = {"command": ["python", "train.py"], "working_dir": str(tmp_path)}

    async def scenario(client: trainplane.AsyncClient) -> Job:
        return await client.submit(
            spec(f"async-up-{uuid.uuid4().hex[:8]}", project, entrypoint=entrypoint), upload=True
        )

    job = as_admin(scenario)

    digest = "sha256:" + hashlib.sha256(bundle_of_folder(tmp_path)).hexdigest()
    assert job.spec["entrypoint"]["code"] == digest
    assert job.spec["entrypoint"]["working_dir"] == "."  # the bundle itself, no local path
