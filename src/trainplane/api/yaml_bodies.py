"""Specs posted as YAML (``Content-Type: application/yaml``) to the job
routes, for the dashboard's paste box and for ``curl --data-binary @job.yaml``.

The body is parsed here, before routing, and handed on as the JSON it
denotes, so the routes and their validation see one format. This middleware
runs inside :mod:`.authentication`, so only a caller the server knows gets a
body parsed, and the parsing (pure Python, slow) runs in a worker thread so
the event loop keeps answering others.

Aliases (``*name``) are refused: expanding them is how a tiny YAML document
becomes gigabytes of JSON. Nesting and size are capped (MAX_YAML_DEPTH,
MAX_YAML_NODES): composing a node recurses, and a spec needs neither more than
a few levels nor more than a few hundred values.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from anyio import to_thread
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


# A spec nests a handful of levels and holds hundreds of values, not thousands.
MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 100_000


class YamlLimitError(yaml.YAMLError):
    """The document is over one of the limits; the message names it."""


class _BoundedLoader(yaml.SafeLoader):
    """A safe loader without aliases, whose documents stay within the limits."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.MarkedYAMLError(
                problem="aliases (*name) are not accepted", problem_mark=mark
            )
        self._nodes += 1
        if self._nodes > MAX_YAML_NODES:
            raise YamlLimitError(
                f"the YAML holds more than {MAX_YAML_NODES} values, keys and collections "
                f"(the limit is {MAX_YAML_NODES} nodes)"
            )
        if self._depth >= MAX_YAML_DEPTH:
            raise YamlLimitError(
                f"the YAML nests more than {MAX_YAML_DEPTH} levels deep "
                f"(the limit is a depth of {MAX_YAML_DEPTH})"
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def parse(text: str) -> Any:
    return yaml.load(text, Loader=_BoundedLoader)


def describe(error: yaml.YAMLError) -> str:
    if isinstance(error, YamlLimitError):
        return str(error)
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
            body = await to_thread.run_sync(as_json, b"".join(chunks))
        except UnicodeDecodeError:
            await _invalid("the body is not UTF-8 text")(scope, receive, send)
            return
        except yaml.YAMLError as exc:
            await _invalid(describe(exc))(scope, receive, send)
            return
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


def as_json(data: bytes) -> bytes:
    """The JSON text of the YAML document ``data``; raises UnicodeDecodeError
    or yaml.YAMLError. Dates and times YAML reads as such become the strings
    they were written as."""
    return json.dumps(parse(data.decode("utf-8")), default=str).encode()


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
