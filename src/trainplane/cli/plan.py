"""``plan``: a dry run of ``submit``. The server validates the spec, checks
what it refers to (datasets, the base model) and says where the job would run,
with which strategy and memory per GPU, when it would start and what it would
cost; nothing is created. Fields of the answer this version does not know are
shown as they come."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from trainplane.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    State,
    exit_code_for,
    say,
    sent_errors,
)
from trainplane.cli.output import OutputChoice, OutputOption, emit
from trainplane.cli.spec_problems import spec_refusal
from trainplane.cli.upload import UploadError, UploadOption, send_local_files
from trainplane.sdk.errors import TrainplaneError
from trainplane.sdk.specfile import SpecFileError, load_spec_file

PLAN_PATH = "/v1/jobs/plan"
# Shown in their own way; every other field of the answer is shown as it is.
KNOWN_FIELDS = ("valid", "spec", "checks", "placement", "strategy", "memory", "cost", "sweep")


def plan(
    file: Annotated[Path, typer.Argument(help="Job spec, YAML or JSON.")],
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a field, as for submit (repeatable)."),
    ] = None,
    output: OutputOption = None,
    upload: UploadOption = None,
) -> None:
    """Check a spec without submitting it: its files on this machine (the
    working folder and the module or script in it, a fine-tune's model and
    datasets), then, on the server, validation, datasets and model, placement.
    Exit 0 when it is valid, 2 when it is not (the message names the field).
    No job is created; what a submit would upload is uploaded now (once: a
    later submit of the same files sends only the spec)."""
    fmt = OutputChoice.of(output)
    as_json = fmt != "table"  # the answer as one JSON or YAML document
    try:
        spec = load_spec_file(file, set_ or [])
    except SpecFileError as exc:
        if as_json:
            emit({"valid": False, "detail": str(exc), "errors": []}, fmt)
        say(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    client = State.client()
    try:
        spec = send_local_files(client, spec, upload)
        answer = client.post(PLAN_PATH, spec)
    except UploadError as exc:
        if as_json:
            body = {"valid": False, "detail": str(exc), "errors": exc.errors}
            emit(body, fmt)
        say(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    except TrainplaneError as exc:
        raise _refused(exc, fmt, file) from None
    valid = answer.get("valid", True) is not False
    emit(answer, fmt, print_plan)
    raise typer.Exit(EXIT_OK if valid else EXIT_USAGE)


def _refused(exc: TrainplaneError, fmt: str, file: Path) -> typer.Exit:
    code = exit_code_for(exc)
    message = spec_refusal(exc, file)
    if exc.status == 404:
        code = EXIT_FAILED
        message = (
            f"this server has no {PLAN_PATH} (it predates trainplane plan; upgrade it): {message}"
        )
    if fmt != "table":
        body = exc.body or {"status": exc.status, "detail": exc.detail, "errors": sent_errors(exc)}
        emit({"valid": False if code == EXIT_USAGE else None, **body}, fmt)
    say(message)
    return typer.Exit(code)


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def print_plan(answer: dict[str, Any]) -> None:
    spec = answer.get("spec") or {}
    valid = answer.get("valid", True) is not False
    what = " ".join(str(spec[key]) for key in ("kind", "name") if spec.get(key))
    typer.echo(f"{'valid' if valid else 'NOT valid'}{': ' + what if what else ''}")
    _print_sweep(answer.get("sweep"))
    checks = answer.get("checks") or []
    if checks:
        typer.echo("checks:")
        width = max(len(str(check.get("name", ""))) for check in checks)
        for check in checks:
            mark = "ok  " if check.get("ok") else "FAIL"
            name = str(check.get("name", "")).ljust(width)
            typer.echo(f"  {mark}  {name}  {check.get('detail', '')}".rstrip())
    placement = answer.get("placement")
    if isinstance(placement, dict):
        cluster = placement.get("cluster") or "none"
        now = placement.get("can_start_now")
        start = {True: "can start now", False: "cannot start now"}.get(now, "")
        reason = placement.get("reason") or ""
        typer.echo(
            "placement: "
            + "; ".join(part for part in (f"cluster {cluster}", start, reason) if part)
        )
        for key, value in placement.items():
            if key not in ("cluster", "can_start_now", "reason"):
                typer.echo(f"  {key}: {_show(value)}")
    elif placement is not None:
        typer.echo(f"placement: {_show(placement)}")
    _print_strategy(answer.get("strategy"), answer.get("memory"))
    _print_cost(answer.get("cost"))
    for key, value in answer.items():
        if key not in KNOWN_FIELDS:
            typer.echo(f"{key}: {_show(value)}")


def _print_sweep(sweep: Any) -> None:
    """The whole search; what follows is of its largest trial."""
    if not isinstance(sweep, dict):
        return
    gpus = sweep.get("gpus_per_trial") or {}
    fewest, most = gpus.get("min"), gpus.get("max")
    per_trial = f"{fewest}..{most}" if fewest != most else f"{most}"
    typer.echo(
        f"sweep: {sweep.get('trials')} trials, {sweep.get('parallel')} at once, "
        f"{per_trial} GPUs per trial, peak {sweep.get('peak_gpus')} GPUs"
    )
    hours, cost = sweep.get("worst_case_gpu_hours"), sweep.get("worst_case_cost")
    if hours is None:
        typer.echo(f"  worst case: {sweep.get('basis') or 'unbounded'}")
    else:
        money = f", cost {cost:.2f}" if cost is not None else ""
        typer.echo(f"  worst case: {hours:g} GPU-hours{money} ({sweep.get('basis', '')})")
    if sweep.get("trial"):
        typer.echo(f"below, the largest trial: {sweep['trial']}")


def _print_strategy(strategy: Any, memory: Any) -> None:
    if isinstance(strategy, dict):
        requested, chosen = strategy.get("requested"), strategy.get("chosen")
        picked = f"{requested} -> {chosen}" if requested == "auto" else str(chosen)
        typer.echo(f"strategy: {picked}: {strategy.get('reason', '')}")
    if isinstance(memory, dict):
        of = memory.get("gpu_memory_gb")
        share = f" of {of:g} GB ({memory.get('fraction', 0):.0%})" if of else ""
        typer.echo(f"memory per GPU: {memory.get('total_gb', 0):.1f} GB{share}")
        for part, size in (memory.get("per_gpu_gb") or {}).items():
            typer.echo(f"  {part:<17} {size:10.2f} GB")
        for part, size in (memory.get("host_per_worker_gb") or {}).items():
            typer.echo(f"  host {part:<12} {size:10.2f} GB (offloaded, per worker)")
        for note in memory.get("notes") or []:
            typer.echo(f"  note: {note}")


def _print_cost(cost: Any) -> None:
    if not isinstance(cost, dict):
        return
    price = cost.get("price_per_gpu_hour")
    where = f" on cluster {cost['cluster']} at {price:g}/GPU-hour" if cost.get("cluster") else ""
    if cost.get("expected_cost") is not None:
        minutes = (cost.get("expected_seconds") or 0) / 60
        typer.echo(f"cost: about {cost['expected_cost']:.2f}{where}, {minutes:.0f} min")
    else:
        typer.echo(f"cost: unknown{where}")
    if cost.get("max_cost") is not None:
        typer.echo(f"  at most {cost['max_cost']:.2f} (its max_runtime)")
    if cost.get("basis"):
        typer.echo(f"  {cost['basis']}")
