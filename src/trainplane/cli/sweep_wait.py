"""``submit --wait`` of a sweep: its trials as a live table while it searches
(``cli.trials.TrialBoard``), and once it ended the best trial; the sweep has no
log or progress of its own, its trials do."""

from __future__ import annotations

import time
from typing import Any

from trainplane.cli.common import TERMINAL, say
from trainplane.cli.output import describe_model, describe_tracking
from trainplane.cli.trials import TrialBoard, best_line, table_lines
from trainplane.cli.waiting import POLL_SECONDS, Waiter


def trials_path(sweep_id: str) -> str:
    return f"/v1/jobs/{sweep_id}/trials"


def wait_for_sweep(
    waiter: Waiter, sweep: dict[str, Any], board: TrialBoard
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ended sweep and its trials (``GET /v1/jobs/{id}/trials``), read
    after the sweep ended so that they are final too."""
    board.seen = (sweep["status"], sweep["reason"])  # submit said it already
    listing = waiter.read(trials_path(sweep["id"]))
    board.show(sweep, listing)
    while sweep["status"] not in TERMINAL:
        waiter.check_deadline()
        time.sleep(POLL_SECONDS)
        sweep = waiter.get(sweep["id"])
        listing = waiter.read(trials_path(sweep["id"]))
        board.show(sweep, listing)
    if not board.terminal and listing.get("items"):
        # A CI log gets the whole table once, at the end.
        for line in table_lines(listing):
            say(line)
    board.close()
    return sweep, listing


def with_best_metrics(sweep: dict[str, Any]) -> dict[str, Any]:
    """The sweep with its best trial's objective as its metrics, so that
    ``--fail-on "loss>0.5"`` judges the best trial."""
    best = sweep.get("best_trial")
    objective = (best or {}).get("objective") or {}
    if sweep.get("latest_metrics") or objective.get("value") is None:
        return sweep
    return {**sweep, "latest_metrics": {objective["metric"]: objective["value"]}}


def report_sweep_end(final: dict[str, Any], listing: dict[str, Any]) -> None:
    sweep_id = final["id"]
    say(f"sweep {sweep_id} {final['status']}: {final['reason']}")
    say(best_line({**listing, "best_trial": final.get("best_trial") or listing.get("best_trial")}))
    tracking = final.get("tracking") or {}
    if tracking.get("run_id"):
        say(f"mlflow {describe_tracking(tracking)}")
    if final.get("registered_model"):
        say(f"registered model {describe_model(final['registered_model'])}")
    if tracking.get("error"):
        say(f"mlflow: {tracking['error']}")
    say(f"trials: trainplane jobs trials {sweep_id}   events: trainplane jobs events {sweep_id}")
