"""Process logging: readable lines for a terminal, or one JSON object per line
(``TRAINPLANE_LOG_FORMAT=json``) for a log pipeline. Scheduler lines about a
job carry ``job_id`` (and ``attempt_id``) as fields of their own, passed as
``extra=`` by the code that logs them, so that a job's history can be queried
without parsing messages."""

from __future__ import annotations

import json
import logging
import logging.config
from datetime import UTC, datetime
from typing import Any

# Fields of a LogRecord that are not the caller's extras.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
}
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Every probe and every job upload would otherwise be an INFO line, and every
# migration at start-up too (the server says in one line what it applied).
_NOISY = ("httpx", "ray", "alembic")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and not key.startswith("_"):
                entry[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def logging_config(level: str = "info", log_format: str = "text") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` document; uvicorn applies the same one
    in each of its worker processes."""
    formatter: dict[str, Any] = (
        {"()": f"{__name__}.JsonFormatter"} if log_format == "json" else {"format": _TEXT_FORMAT}
    )
    level = level.upper()
    quiet = max(logging.WARNING, logging.getLevelName(level))
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"trainplane": formatter},
        "handlers": {
            "stderr": {"class": "logging.StreamHandler", "formatter": "trainplane"},
        },
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {
            # uvicorn's own loggers go through the same handler and format.
            "uvicorn": {"level": level, "handlers": [], "propagate": True},
            "uvicorn.error": {"level": level, "handlers": [], "propagate": True},
            "uvicorn.access": {"level": level, "handlers": [], "propagate": True},
            **{name: {"level": logging.getLevelName(quiet)} for name in _NOISY},
        },
    }


def configure_logging(level: str = "info", log_format: str = "text") -> None:
    logging.config.dictConfig(logging_config(level, log_format))
