"""``submit``: send a spec, and with ``--wait`` see the job through to its end
the way a CI pipeline needs it: progress on stderr, ``--fail-on`` gates on the
final metrics, one JSON result on stdout (``--output json``) and an exit code
that says what happened (the table is in ``trainplane.cli.common``)."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from trainplane.cli.ci import MissingCiVariables, derive_key
from trainplane.cli.common import (
    EXIT_CANCELLED,
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_THRESHOLD,
    EXIT_TIMEOUT,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    TERMINAL,
    State,
    exit_code_for,
    exit_code_table,
    refusal,
    say,
    sent_errors,
)
from trainplane.cli.follow import DeadlinePassed, follow_logs
from trainplane.cli.gates import Gate, GateResult, GateSyntaxError, not_checked
from trainplane.cli.output import (
    OutputChoice,
    OutputOption,
    describe_model,
    describe_tracking,
    emit,
    metrics_line,
)
from trainplane.cli.progress import DEFAULT_INTERVAL, ProgressPrinter, is_terminal
from trainplane.cli.spec_problems import spec_refusal
from trainplane.cli.sweep_wait import report_sweep_end, wait_for_sweep, with_best_metrics
from trainplane.cli.trials import TrialBoard
from trainplane.cli.upload import UploadError, UploadOption, send_local_files
from trainplane.cli.waiting import RECONNECT_SECONDS, Waiter
from trainplane.sdk.errors import TrainplaneError
from trainplane.sdk.sessions import Session
from trainplane.sdk.specfile import SpecFileError, load_spec_file

# After a job ends, --wait waits this long (by default) for its MLflow run to be
# closed and its model registered.
TRACKING_WAIT_SECONDS = 120.0

# What each exit code is called in --output json (exit 1 before any job
# exists is "refused").
OUTCOMES = {
    EXIT_OK: "succeeded",
    EXIT_FAILED: "failed",
    EXIT_USAGE: "invalid",
    EXIT_CANCELLED: "cancelled",
    EXIT_THRESHOLD: "threshold_failed",
    EXIT_TIMEOUT: "timed_out",
    EXIT_UNREACHABLE: "unreachable",
    EXIT_INTERRUPTED: "interrupted",
}


# One line per paragraph: the help formatter wraps them to the terminal.
HELP = "\n\n".join(
    [
        "Submit a job; prints its id (with --output json: the job, as JSON).",
        "With --wait (implied by --follow and --fail-on) it waits for the job to end, "
        "printing status changes and progress on stderr, and exits with a code that says "
        "how it ended. With --output json the result (status, final metrics, gates, MLflow "
        "run, registered model, exit code) is one JSON object on stdout.",
        "In GitHub Actions or GitLab CI (or with TRAINPLANE_CI_RUN_ID set) an idempotency "
        "key is derived from the pipeline run, the step and the spec, so a retried step "
        "finds the job it started instead of starting a second one. Elsewhere, pass "
        "--idempotency-key.",
        "Exit codes:",
        exit_code_table("  "),
    ]
)


def _check_gates(values: list[str] | None) -> list[str] | None:
    for value in values or []:
        try:
            Gate.parse(value)
        except GateSyntaxError as exc:
            raise typer.BadParameter(str(exc)) from None
    return values


@dataclass
class Result:
    """What ``--output json`` (or yaml) prints at the end, built up as the command goes."""

    fmt: str  # --output: table, json or yaml
    server: str  # the API's base URL
    job: dict[str, Any] | None = None
    created: bool | None = None
    idempotency_key: str | None = None
    gates: list[GateResult] = field(default_factory=list)
    trials: dict[str, Any] | None = None  # a sweep's, as GET /v1/jobs/{id}/trials
    errors: list[dict[str, Any]] = field(default_factory=list)

    def finish(
        self, code: int, message: str, outcome: str | None = None, *, said: bool = False
    ) -> typer.Exit:
        """Say how it ended (stderr; ``said``: the message was shown already),
        print the JSON result (stdout), exit."""
        if not said:
            say(message)
        say(f"exit code {code}: {EXIT_CODES[code]}")
        if self.fmt != "table":
            emit(self.summary(code, message, outcome), self.fmt)
        return typer.Exit(code)

    def url(self, job_id: str) -> str:
        """The job's page in the dashboard."""
        return f"{self.server}/jobs/{job_id}"

    def summary(self, code: int, message: str, outcome: str | None = None) -> dict[str, Any]:
        job = self.job or {}
        tracking = job.get("tracking") or {}
        return {
            "id": job.get("id"),
            "name": job.get("name"),
            "project": job.get("project"),
            "status": job.get("status"),
            "reason": job.get("reason"),
            "created": self.created,
            "idempotency_key": self.idempotency_key,
            "url": self.url(job["id"]) if job.get("id") else None,
            "progress": job.get("progress"),
            "metrics": job.get("latest_metrics") or {},
            "thresholds": [result.as_json() for result in self.gates],
            "tracking": {
                key: tracking.get(key)
                for key in ("status", "experiment", "run_id", "run_url", "error")
            }
            if tracking
            else None,
            "registered_model": job.get("registered_model"),
            "exit_code": code,
            "outcome": outcome or OUTCOMES[code],
            "exit_meaning": EXIT_CODES[code],
            "message": message,
            "errors": self.errors,
            **({} if self.trials is None else self.sweep_summary(job)),
        }

    def sweep_summary(self, job: dict[str, Any]) -> dict[str, Any]:
        trials = self.trials or {}
        return {
            "best_trial": job.get("best_trial") or trials.get("best_trial"),
            "trial_counts": job.get("trials"),
            "trials": trials,
        }


def submit(
    file: Annotated[Path, typer.Argument(help="Job spec, YAML or JSON.")],
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override a field; the value is read as YAML (numbers, lists, mappings): "
            "--set resources.gpus=4, --set entrypoint.command.1=train.py (repeatable).",
        ),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            help="Resubmitting with the same key (and spec) returns the same job. "
            "Default in CI: derived from the pipeline run, the step and the spec."
        ),
    ] = None,
    no_idempotency_key: Annotated[
        bool,
        typer.Option("--no-idempotency-key", help="Send no key, even in CI: always a new job."),
    ] = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            "-w",
            help="Wait for the job to end; exit 0 only if it SUCCEEDED (and passed).",
        ),
    ] = False,
    follow: Annotated[
        bool, typer.Option(help="Print the job's logs until it ends (implies --wait).")
    ] = False,
    fail_on: Annotated[
        list[str] | None,
        typer.Option(
            help="Fail (exit 4) when the job's final metric matches, e.g. 'eval_loss>2.0' "
            "(> >= < <= == !=; repeatable; a metric never reported fails too). "
            "Implies --wait.",
            callback=_check_gates,
        ),
    ] = None,
    output: OutputOption = None,
    timeout: Annotated[
        float | None,
        typer.Option(help="Give up waiting after this many seconds (exit 5; the job goes on)."),
    ] = None,
    progress_interval: Annotated[
        float,
        typer.Option(
            envvar="TRAINPLANE_PROGRESS_INTERVAL",
            min=0,
            help="When stderr is not a terminal: seconds between progress lines.",
        ),
    ] = DEFAULT_INTERVAL,
    reconnect_timeout: Annotated[
        float,
        typer.Option(
            min=0,
            help="While waiting, how long to keep retrying a server that stopped answering "
            "before giving up (exit 6).",
        ),
    ] = RECONNECT_SECONDS,
    tracking_timeout: Annotated[
        float,
        typer.Option(
            help="With --wait: once the job ended, wait this long for its MLflow "
            "run to be complete and its model registered."
        ),
    ] = TRACKING_WAIT_SECONDS,
    upload: UploadOption = None,
) -> None:
    fmt = OutputChoice.of(output)
    as_json = fmt != "table"  # stdout is for the one JSON (or YAML) document
    gates = [Gate.parse(expression) for expression in fail_on or []]
    waiting = wait or follow or bool(gates)
    if idempotency_key and no_idempotency_key:
        raise typer.BadParameter(
            "--idempotency-key and --no-idempotency-key contradict each other",
            param_hint="'--no-idempotency-key'",
        )
    result = Result(fmt, State.url.rstrip("/"))
    try:
        spec = load_spec_file(file, set_ or [])
    except SpecFileError as exc:
        raise result.finish(EXIT_USAGE, str(exc)) from None
    client = State.client()
    try:
        spec = send_local_files(client, spec, upload)
        # After the upload: the same files make the same digest, so the same key.
        result.idempotency_key = _choose_key(spec, idempotency_key, no_idempotency_key)
        job, created = _post_job(client, spec, result.idempotency_key)
    except UploadError as exc:
        result.errors = exc.errors
        raise result.finish(EXIT_USAGE, str(exc)) from None
    except TrainplaneError as exc:
        result.errors = sent_errors(exc)
        code = exit_code_for(exc)
        # Exit 1 with no job: the server said no (a key reused for another spec, ...).
        outcome = "refused" if code == EXIT_FAILED else None
        raise result.finish(code, spec_refusal(exc, file), outcome) from None
    result.job, result.created = job, created
    _say_submitted(job, created)
    if not waiting:
        emit(job, fmt, lambda j: typer.echo(j["id"]))
        return
    if not as_json:
        typer.echo(job["id"])  # today's output: the id, first thing on stdout
    say(f"job: {result.url(job['id'])}")
    deadline = None if timeout is None else time.monotonic() + timeout
    waiter = Waiter(client, reconnect_timeout, deadline)
    try:
        if job.get("kind") == "sweep":  # no log or progress of its own: its trials'
            board = TrialBoard(
                sys.stderr, terminal=is_terminal(sys.stderr), interval=progress_interval
            )
            final, result.trials = wait_for_sweep(waiter, job, board)
        elif follow:
            follow_logs(client, job["id"], deadline=deadline, logs_to_stderr=as_json)
            final = waiter.get(job["id"])
        else:
            printer = ProgressPrinter(
                sys.stderr,
                terminal=is_terminal(sys.stderr),
                interval=progress_interval,
                metrics=[gate.metric for gate in gates],
            )
            try:
                final = waiter.wait(job, printer)
            finally:
                printer.close()
        final = waiter.tracking(final, tracking_timeout)
    except DeadlinePassed:
        result.job = waiter.last or result.job
        current = result.job
        raise result.finish(
            EXIT_TIMEOUT,
            f"gave up waiting after {timeout:g}s; job {current['id']} is {current['status']}: "
            f"{current['reason']} (it goes on; trainplane jobs cancel {current['id']} stops it)",
        ) from None
    except TrainplaneError as exc:
        result.job = waiter.last or result.job
        raise result.finish(exit_code_for(exc), refusal(exc)) from None
    except KeyboardInterrupt:
        result.job = waiter.last or result.job
        raise result.finish(
            EXIT_INTERRUPTED,
            f"interrupted; job {job['id']} goes on (trainplane jobs cancel {job['id']} stops it)",
        ) from None
    if result.trials is not None:
        result.job = final = with_best_metrics(final)
        report_sweep_end(final, result.trials)
    else:
        result.job = final
        _report_end(final)
    code, message = _judge(final, gates, result)
    raise result.finish(code, message, said=True)


def _choose_key(spec: dict[str, Any], given: str | None, none: bool) -> str | None:
    if given:
        say(f"idempotency key {given} (--idempotency-key)")
        return given
    if none:
        return None
    try:
        derived = derive_key(os.environ, spec)
    except MissingCiVariables as exc:
        say(f"warning: {exc}")
        return None
    if derived is None:
        return None
    say(
        f"idempotency key {derived.key} (from {derived.source}; --idempotency-key to choose "
        "one, --no-idempotency-key for none)"
    )
    return derived.key


def _post_job(
    client: Session, spec: dict[str, Any], key: str | None
) -> tuple[dict[str, Any], bool]:
    """The job, and whether this request created it (False: the key's earlier job)."""
    headers = {"Idempotency-Key": key} if key else {}
    response = client.send("POST", "/v1/jobs", json=spec, headers=headers)
    replayed = response.headers.get("Idempotent-Replayed", "").lower() == "true"
    return response.json(), not replayed


def _say_submitted(job: dict[str, Any], created: bool) -> None:
    if created:
        say(f"job {job['id']} ({job['name']}) {job['status']}: {job['reason']}")
        return
    say(
        f"reusing job {job['id']} ({job['name']}), submitted earlier with this idempotency "
        f"key; it is {job['status']}: {job['reason']}"
    )
    if job["status"] in TERMINAL and job["status"] != "SUCCEEDED":
        say(
            "it ended already; to run the spec again, pass a new --idempotency-key "
            "(or --no-idempotency-key)"
        )


def _report_end(final: dict[str, Any]) -> None:
    job_id = final["id"]
    say(f"job {job_id} {final['status']}: {final['reason']}")
    if final.get("latest_metrics"):
        say(f"final metrics: {metrics_line(final['latest_metrics'])}")
    tracking = final["tracking"]
    if tracking["run_id"]:
        say(f"mlflow {describe_tracking(tracking)}")
    if final.get("registered_model"):
        say(f"registered model {describe_model(final['registered_model'])}")
    if tracking["error"]:
        say(f"mlflow: {tracking['error']}")
    say(f"logs: trainplane jobs logs {job_id}   events: trainplane jobs events {job_id}")


def _judge(final: dict[str, Any], gates: list[Gate], result: Result) -> tuple[int, str]:
    """The exit code, and in words why (for the JSON result; the log has it)."""
    status = final["status"]
    ended = f"job {final['id']} {status}: {final['reason']}"
    if status != "SUCCEEDED":
        result.gates = [not_checked(gate, status) for gate in gates]
        return (EXIT_CANCELLED if status == "CANCELLED" else EXIT_FAILED), ended
    result.gates = [gate.check(final.get("latest_metrics") or {}) for gate in gates]
    for checked in result.gates:
        say(f"gate {checked.gate.expression}: {checked.message}")
    failed = [checked for checked in result.gates if not checked.passed]
    if failed:
        return EXIT_THRESHOLD, "; ".join(f"gate {c.gate.expression}: {c.message}" for c in failed)
    return EXIT_OK, ended
