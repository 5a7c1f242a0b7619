"""The SDK against the server's own ``/openapi.json``: every operation the SDK
calls exists, every public operation has a call, and every field of every
model the SDK returns is one the server's response schema has (required
where the SDK requires it). A server change that the SDK does not follow
fails here, not in a user's program."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from trainplane.sdk import calls
from trainplane.sdk.aio import AsyncClient
from trainplane.sdk.client import Client
from trainplane.sdk.models import Model
from trainplane.sdk.transport import Operation


@pytest.fixture(scope="module")
def openapi(live_server) -> dict[str, Any]:
    return httpx.get(f"{live_server.url}/openapi.json", timeout=10).json()


def _operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in document["paths"].items() for method in item}


def test_the_sdk_calls_every_public_operation_and_only_those(openapi):
    sdk = {(op.method, op.path) for op in calls.OPERATIONS}

    assert len(sdk) == len(calls.OPERATIONS), "no operation listed twice"
    assert sdk - _operations(openapi) == set(), "the SDK calls what the server lacks"
    assert _operations(openapi) - sdk == set(calls.RUNTIME_ONLY), "an operation has no call"


def _resolve(schema: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _refs(schema: Any) -> list[dict[str, Any]]:
    """The referenced schemas inside a property's (through lists, maps, unions)."""
    if isinstance(schema, list):
        return [ref for part in schema for ref in _refs(part)]
    if not isinstance(schema, dict):
        return []
    if "$ref" in schema:
        return [schema]
    keys = ("anyOf", "oneOf", "allOf", "items", "additionalProperties")
    return [ref for key in keys for ref in _refs(schema.get(key))]


def _sdk_models(annotation: Any) -> list[type[BaseModel]]:
    """The SDK models inside a field's type (through lists, dicts, Optional)."""
    if isinstance(annotation, type) and issubclass(annotation, Model):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _sdk_models(arg)]


def _check(model: type[BaseModel], schema: dict[str, Any], document: dict[str, Any], where: str):
    server = _resolve(schema, document)
    properties, required = server.get("properties", {}), set(server.get("required", []))
    for name, field in model.model_fields.items():
        assert name in properties, f"{where}.{name}: not in the server's {server.get('title')}"
        if field.is_required():
            assert name in required, f"{where}.{name}: the server may leave it out"
        nested = _sdk_models(field.annotation)
        if nested:
            refs = _refs(properties[name])
            assert len(nested) == len(refs) == 1, f"{where}.{name}: {nested} ~ {refs}"
            _check(nested[0], refs[0], document, f"{where}.{name}")


def _success(operation: Operation, document: dict[str, Any]) -> dict[str, Any]:
    responses = document["paths"][operation.path][operation.method.lower()]["responses"]
    return next(responses[code] for code in ("200", "201", "204") if code in responses)


@pytest.mark.parametrize("operation", calls.OPERATIONS, ids=lambda op: f"{op.method} {op.path}")
def test_each_model_matches_the_server_response_schema(openapi, operation):
    answer = _success(operation, openapi)
    content = answer.get("content", {})

    if operation.response is None:
        assert content == {}, "the SDK ignores a body the server sends"
    elif operation.response is str:
        assert "text/plain" in content
    else:
        schema = content["application/json"]["schema"]
        _check(operation.response, schema, openapi, operation.response.__name__)


def test_the_async_client_has_the_sync_clients_methods():
    def public(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in vars(cls).items()
            if callable(member) and not name.startswith("_")
        }

    sync, asynchronous = public(Client), public(AsyncClient)
    assert sync.keys() == asynchronous.keys()
    for name, signature in sync.items():
        assert signature.parameters == asynchronous[name].parameters, name
