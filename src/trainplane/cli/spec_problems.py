"""How ``submit`` and ``plan`` print a spec the server refused: each field
error once, on its own line, with the file and the line of the field in it
(``job.yaml, line 5: `strategy` is a mapping like `{type: ddp}`, not `ddp```),
so the line to edit is one click away in an editor or a CI log."""

from __future__ import annotations

from pathlib import Path

from trainplane.cli.common import refusal
from trainplane.jobs.yaml_lines import line_of
from trainplane.sdk.errors import TrainplaneError

# The statuses whose field errors are about the spec that was sent.
SPEC_STATUSES = frozenset({400, 422})


def spec_refusal(error: TrainplaneError, file: Path) -> str:
    """The lines to print for ``error``, a refusal of the spec read from ``file``."""
    if error.status not in SPEC_STATUSES or not error.errors:
        return refusal(error)
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError):
        text = ""
    lines = []
    for field_error in error.errors:
        field, message = field_error.field, field_error.message
        if field not in message:  # an older server's words do not name the field
            message = f"{field}: {message}"
        line = line_of(text, field) if text and field not in ("body", "spec") else None
        where = f"{file}, line {line}" if line else str(file)
        if f"{where}: {message}" not in lines:
            lines.append(f"{where}: {message}")
    return "\n".join(lines)
