"""Specs posted as YAML (``Content-Type: application/yaml``) to the job
routes, for the dashboard's paste box and for ``curl --data-binary @job.yaml``.

The body is parsed here, before routing, and handed on as the JSON it
denotes, so the routes and their validation see one format. Aliases
(``*name``) are refused: expanding them is how a tiny YAML document becomes
gigabytes of JSON.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trainplane.api import problems

YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})
YAML_PATHS = frozenset({"/v1/jobs", "/v1/jobs/plan"})
# For the OpenAPI document of the routes that accept it.
YAML_REQUEST_BODY = {
    "requestBody": {
        "content": {
            "application/yaml": {
                "schema": {"type": "string", "description": "The same spec, as YAML."}
            }
        }
    }
}


class _NoAliases(yaml.SafeLoader):
    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.MarkedYAMLError(
                problem="aliases (*name) are not accepted", problem_mark=mark
            )
        return super().compose_node(parent, index)


def parse(text: str) -> Any:
    return yaml.load(text, Loader=_NoAliases)


def describe(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    if mark is None:
        return f"invalid YAML: {problem}"
    return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"


class YamlBodies:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _is_yaml_post(scope):
            await self.app(scope, receive, send)
            return
        chunks = []
        try:
            while True:
                message = await receive()
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    break
        except HTTPException as exc:
            # The size limit refuses a chunked body as it streams in. Raised
            # here, outside the routes, no exception handler would see it.
            await problems.problem(exc.status_code, str(exc.detail))(scope, receive, send)
            return
        try:
            document = parse(b"".join(chunks).decode("utf-8"))
        except UnicodeDecodeError:
            await _invalid("the body is not UTF-8 text")(scope, receive, send)
            return
        except yaml.YAMLError as exc:
            await _invalid(describe(exc))(scope, receive, send)
            return
        # Dates and times YAML reads as such become the strings they were written as.
        body = json.dumps(document, default=str).encode()
        headers = [
            (k, v) for k, v in scope["headers"] if k not in (b"content-type", b"content-length")
        ]
        headers += [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app({**scope, "headers": headers}, replay, send)


def _is_yaml_post(scope: Scope) -> bool:
    if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in YAML_PATHS:
        return False
    content_type = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")
    return content_type.split(";")[0].strip().lower() in YAML_TYPES


def _invalid(message: str) -> Any:
    return problems.problem(
        422,
        f"body: {message}",
        errors=[problems.FieldError(field="body", message=message, type="yaml")],
    )
