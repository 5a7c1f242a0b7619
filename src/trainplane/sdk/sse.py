"""Reading server-sent events (``text/event-stream``) line by line, as the
followed log of ``GET /v1/jobs/{id}/logs?follow=true`` sends them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from trainplane.sdk.models import LogEvent


@dataclass(frozen=True)
class SseEvent:
    name: str
    data: str


@dataclass
class SseDecoder:
    """Fed one line at a time; gives back an event at each blank line that ends one."""

    _name: str = "message"
    _data: list[str] = field(default_factory=list)

    def feed(self, line: str) -> SseEvent | None:
        if line == "":
            event = SseEvent(self._name, "\n".join(self._data)) if self._data else None
            self._name, self._data = "message", []
            return event
        if line.startswith("event:"):
            self._name = line[6:].strip()
        elif line.startswith("data:"):
            self._data.append(line[5:].removeprefix(" "))
        # Anything else is a comment (": keep-alive") or a field no one sends.
        return None


@dataclass
class LogStream:
    """A followed log's lines in, LogEvents out; ``ended`` after the ``end`` event."""

    decoder: SseDecoder = field(default_factory=SseDecoder)
    ended: bool = False

    def feed(self, line: str) -> LogEvent | None:
        event = self.decoder.feed(line)
        if event is None:
            return None
        self.ended = event.name == "end"
        if event.name == "log":
            return LogEvent(event="log", text=event.data)
        fields = json.loads(event.data) if event.data else {}
        if event.name == "attempt":
            return LogEvent(event="attempt", attempt=fields["number"], cluster=fields["cluster"])
        return LogEvent(event=event.name, status=fields.get("status"), reason=fields.get("reason"))
