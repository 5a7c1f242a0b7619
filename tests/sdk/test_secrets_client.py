"""Project secrets through both clients against a live server: set, list
(keys only), use in a spec, delete; a refusal is the SDK's typed error."""

from __future__ import annotations

import asyncio

import pytest

from tests.fuzz.live_server import BOOTSTRAP_TOKEN
from tests.sdk.conftest import spec
from trainplane.sdk.aio import AsyncClient
from trainplane.sdk.errors import InvalidRequest

VALUE = "sdk-secret-value-9c0ffee"


def test_a_secret_is_set_listed_used_and_deleted(admin, project):
    created = admin.set_secret(project, "hf-token", VALUE)
    assert created.key == "hf-token" and created.created_by
    assert [s.key for s in admin.secrets(project)] == ["hf-token"]
    assert VALUE not in repr(admin.secrets(project))

    uses = spec(
        "uses-secret", project, entrypoint={"command": ["true"], "secrets": {"T": "hf-token"}}
    )
    job = admin.submit(uses)
    assert job.spec["entrypoint"]["secrets"] == {"T": "hf-token"}
    admin.cancel(job.id)

    admin.delete_secret(project, "hf-token")
    assert admin.secrets(project) == []
    with pytest.raises(InvalidRequest) as refused:
        admin.submit(uses)
    assert "entrypoint.secrets" in str(refused.value)


def test_the_async_client_manages_secrets_too(live_server, project):
    async def scenario() -> list[str]:
        async with AsyncClient(live_server.url, BOOTSTRAP_TOKEN) as client:
            await client.set_secret(project, "async.key", VALUE)
            keys = [s.key for s in await client.secrets(project)]
            await client.delete_secret(project, "async.key")
            return keys

    assert asyncio.run(scenario()) == ["async.key"]
