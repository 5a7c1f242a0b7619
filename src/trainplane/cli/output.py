"""What verbs print: ``--output table|json|yaml`` (one option, one helper,
``emit``) and the plain-text rendering of jobs, events, metrics and
checkpoints for terminals."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

import typer
import yaml

FORMATS = ("table", "json", "yaml")
# Older spellings still accepted: submit's and plan's "text" is the table.
_ALIASES = {"text": "table"}


def _check_format(value: str | None) -> str | None:
    if value is None:
        return None
    chosen = _ALIASES.get(value.lower(), value.lower())
    if chosen not in FORMATS:
        raise typer.BadParameter(f"'{value}' is not one of {', '.join(FORMATS)}")
    return chosen


OutputOption = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        metavar="table|json|yaml",
        callback=_check_format,
        show_default=False,
        help="How to print the answer: table (default), json or yaml.",
    ),
]
# The old flag, kept working for scripts; not shown in --help.
JsonFlag = Annotated[
    bool, typer.Option("--json", hidden=True, help="Deprecated: use --output json.")
]


class OutputChoice:
    """The format a verb prints in: its own --output, else --json, else the
    global --output (before or after the verb), else table."""

    default: str | None = None  # the global --output

    @classmethod
    def of(cls, output: str | None, as_json: bool = False) -> str:
        if output is not None:
            return output
        return "json" if as_json else (cls.default or "table")


def emit(data: Any, fmt: str, table: Callable[[Any], None] | None = None) -> None:
    """Print ``data`` as JSON or YAML, or through ``table`` (the terminal view)."""
    if fmt == "json" or (fmt == "table" and table is None):
        typer.echo(json.dumps(data, indent=2))
    elif fmt == "yaml":
        typer.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)
    else:
        assert table is not None
        table(data)


def without_nulls(value: Any) -> Any:
    """``value`` without the keys whose value is null, at every depth."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def _when(value: str | None) -> str:
    if not value:
        return "-"
    return datetime.fromisoformat(value).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def print_rows(rows: list[list[str]], header: list[str]) -> None:
    """Columns aligned under ``header``."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        typer.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def print_jobs(jobs: list[dict[str, Any]]) -> None:
    if not jobs:
        typer.echo("no jobs")
        return
    print_rows(
        [
            [
                j["id"],
                j["project"],
                j["name"],
                j["status"],
                str(j["gpus"]),
                _when(j["created_at"]),
                j["reason"],
            ]
            for j in jobs
        ],
        ["ID", "PROJECT", "NAME", "STATUS", "GPUS", "CREATED", "REASON"],
    )


def print_job(job: dict[str, Any]) -> None:
    for key in ("id", "name", "project", "kind", "status", "reason", "priority", "submitted_by"):
        typer.echo(f"{key + ':':14}{job[key]}")
    if job.get("parent"):
        typer.echo(f"{'sweep:':14}{job['parent']} (this job is one of its trials)")
    if job.get("queue_position"):
        typer.echo(f"{'queue:':14}position {job['queue_position']}")
    typer.echo(f"{'resources:':14}{job['gpus']} GPUs{_strategy_of(job)}")
    for key in ("created_at", "started_at", "finished_at"):
        typer.echo(f"{key + ':':14}{_when(job[key])}")
    if job.get("progress"):
        typer.echo(f"{'progress:':14}{describe_progress(job['progress'])}")
    for attempt in job.get("attempts", []):
        code = "" if attempt["exit_code"] is None else f", exit code {attempt['exit_code']}"
        typer.echo(
            f"{'attempt ' + str(attempt['number']) + ':':14}{attempt['status']} on "
            f"{attempt['cluster'] or '-'}{code} {attempt['reason']}".rstrip()
        )
    if job.get("trials"):
        counts = ", ".join(f"{n} {state}" for state, n in job["trials"].items())
        typer.echo(f"{'trials:':14}{counts} (trainplane jobs trials {job['id']})")
    best = job.get("best_trial")
    if best:
        objective = best["objective"]
        typer.echo(
            f"{'best trial:':14}{best['name']} ({best['id']}): "
            f"{objective['metric']} {_number(objective['value'])}"
        )
    if job.get("latest_metrics"):
        typer.echo(f"{'metrics:':14}{metrics_line(job['latest_metrics'])}")
    tracking = job.get("tracking")
    if tracking:
        typer.echo(f"{'mlflow:':14}{describe_tracking(tracking)}")
        if tracking.get("error"):
            typer.echo(f"{'':14}last error ({_when(tracking['error_at'])}): {tracking['error']}")
    if job.get("registered_model"):
        typer.echo(f"{'model:':14}{describe_model(job['registered_model'])}")
    typer.echo("spec:")
    spec = yaml.safe_dump(without_nulls(job["spec"]), sort_keys=False, allow_unicode=True)
    typer.echo("".join(f"  {line}\n" for line in spec.splitlines()), nl=False)


def _strategy_of(job: dict[str, Any]) -> str:
    # A command job starts its own processes: trainplane's strategy does not apply.
    entrypoint = (job.get("spec") or {}).get("entrypoint") or {}
    return "" if entrypoint.get("command") else f", {job['strategy']}"


def metrics_line(metrics: dict[str, float]) -> str:
    return " ".join(f"{k}={_number(v)}" for k, v in sorted(metrics.items()))


def describe_tracking(tracking: dict[str, Any]) -> str:
    where = f"experiment {tracking['experiment']}"
    if tracking.get("run_id"):
        where += f", run {tracking['run_id']}"
    if tracking.get("run_url"):
        where += f" ({tracking['run_url']})"
    return f"{tracking['status']}: {where}"


def describe_model(model: dict[str, Any]) -> str:
    alias = f" alias {model['alias']}" if model.get("alias") else ""
    return f"{model['name']} version {model['version']}{alias} ({model['uri']})"


def print_events(events: list[dict[str, Any]]) -> None:
    print_rows(
        [
            [_when(e["created_at"]), e["from_status"] or "-", e["to_status"], e["reason"]]
            for e in events
        ],
        ["TIME", "FROM", "TO", "REASON"],
    )


def describe_progress(progress: dict[str, Any]) -> str:
    step = "-" if progress["step"] is None else str(progress["step"])
    if progress["total_steps"]:
        step += f"/{progress['total_steps']}"
    heard = _when(progress["last_heartbeat_at"])
    advanced = _when(progress["last_progress_at"])
    return f"attempt {progress['attempt']} at step {step}, last report {heard}, step up {advanced}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def print_metrics(progress: dict[str, Any] | None, points: list[dict[str, Any]]) -> None:
    typer.echo(f"progress: {describe_progress(progress) if progress else 'none reported'}")
    if not points:
        typer.echo("no metrics")
        return
    names = sorted({name for point in points for name in point["metrics"]})
    print_rows(
        [
            [
                str(p["attempt"]),
                str(p["step"]),
                datetime.fromtimestamp(p["time"]).strftime("%Y-%m-%d %H:%M:%S"),
                *(_number(p["metrics"].get(name)) for name in names),
            ]
            for p in points
        ],
        ["ATTEMPT", "STEP", "TIME", *(name.upper() for name in names)],
    )


def _size(size: int) -> str:
    amount = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if amount < 1024:
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} TiB"


def print_checkpoints(listing: dict[str, Any]) -> None:
    if not listing["checkpoints"]:
        typer.echo(f"no checkpoints under {listing['storage']}")
        return
    print_rows(
        [
            [
                str(c["step"]),
                _when(c["created_at"]),
                _size(c["size_bytes"]),
                f"{c['world_size']}x {c['strategy']}",
                " ".join(f"{k}={_number(v)}" for k, v in sorted(c["metrics"].items())) or "-",
                c["uri"],
            ]
            for c in listing["checkpoints"]
        ],
        ["STEP", "CREATED", "SIZE", "WORKERS", "METRICS", "URI"],
    )


def _value(value: Any) -> str:
    if isinstance(value, float):
        return _number(value)
    return "-" if value is None else (value if isinstance(value, str) else json.dumps(value))


def print_comparison(comparison: dict[str, Any]) -> None:
    jobs = comparison["jobs"]
    header = ["", *(j["id"] for j in jobs)]
    rows = [
        ["name", *(j["name"] for j in jobs)],
        ["status", *(j["status"] for j in jobs)],
        ["gpu-hours", *(_number(j["gpu_hours"]) for j in jobs)],
        ["mlflow run", *(j["run_id"] or "-" for j in jobs)],
    ]
    print_rows(rows, header)
    typer.echo()
    if comparison["spec_differences"]:
        print_rows(
            [
                [d["field"], *(_value(v) for v in d["values"])]
                for d in comparison["spec_differences"]
            ],
            ["SPEC FIELD", *("" for _ in jobs)],
        )
    else:
        typer.echo("the specs are the same")
    typer.echo()
    if comparison["metrics"]:
        print_rows(
            [[m["name"], *(_number(v) for v in m["values"])] for m in comparison["metrics"]],
            ["FINAL METRIC", *("" for _ in jobs)],
        )
    else:
        typer.echo("no metrics reported")


def print_models(models: list[dict[str, Any]]) -> None:
    if not models:
        typer.echo("no registered models")
        return
    print_rows(
        [
            [
                model["name"],
                version["version"],
                ",".join(version["aliases"]) or "-",
                version["status"] or "-",
                version["job"]["job_id"] if version["job"] else "-",
                version["job"]["project"] if version["job"] else "-",
                _when(version["created_at"]),
            ]
            for model in models
            for version in model["versions"]
        ],
        ["MODEL", "VERSION", "ALIASES", "STATUS", "JOB", "PROJECT", "CREATED"],
    )
