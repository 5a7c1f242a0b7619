"""How the CLI shows a sweep's trials, in this process: the table ``jobs
trials`` prints and the live view ``submit --wait`` keeps (redrawn in place on
a terminal, changed rows as plain lines in a CI log)."""

from __future__ import annotations

import io

from trainplane.cli.trials import TrialBoard, best_line, parameter_names, table_lines


def _trial(number: int, status: str, lr: float, *, step=None, last=None, best=None, reason=""):
    return {
        "id": f"trial-{number}",
        "name": f"lr-{number}",
        "number": number,
        "status": status,
        "reason": reason,
        "parameters": {"entrypoint.args.lr": lr, "strategy.type": "ddp"},
        "objective": "loss",
        "last_value": last,
        "best_value": best,
        "step": step,
        "values": {},
    }


def _listing(*items, best: str | None = None):
    best_trial = None
    for item in items:
        if item["id"] == best:
            best_trial = {
                "id": item["id"],
                "name": item["name"],
                "number": item["number"],
                "parameters": item["parameters"],
                "objective": {"metric": "loss", "value": item["last_value"]},
            }
    return {
        "items": list(items),
        "objective": {"metric": "loss", "mode": "min"},
        "best_trial": best_trial,
    }


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_table_is_by_number_names_parameters_by_their_last_part_and_marks_the_best():
    listing = _listing(
        _trial(2, "CANCELLED", 0.3, step=10, last=2.5, best=2.4, reason="pruned at step 10"),
        _trial(1, "SUCCEEDED", 0.003, step=60, last=0.41, best=0.39),
        best="trial-1",
    )
    header, first, second = table_lines(listing)
    columns = ["#", "TRIAL", "STATUS", "LR", "TYPE", "LOSS", "BEST", "STEP", "REASON"]
    assert header.split() == columns
    assert first.split() == ["1*", "lr-1", "SUCCEEDED", "0.003", "ddp", "0.41", "0.39", "60"]
    assert second.split()[:8] == ["2", "lr-2", "CANCELLED", "0.3", "ddp", "2.5", "2.4", "10"]
    assert second.endswith("pruned at step 10")
    assert best_line(listing) == "best trial lr-1 (lr=0.003 type=ddp): loss 0.41 (min)"


def test_paths_that_end_alike_keep_their_whole_path_as_the_column_name():
    items = [{"parameters": {"entrypoint.args.size": 1, "model.size": 2, "a.lr": 3}}]
    assert parameter_names(items) == {
        "entrypoint.args.size": "entrypoint.args.size",
        "model.size": "model.size",
        "a.lr": "lr",
    }


def test_with_no_succeeded_trial_the_best_line_says_so():
    listing = _listing(_trial(1, "RUNNING", 0.1, step=3, last=1.0, best=1.0))
    assert best_line(listing) == "no best trial yet: no trial succeeded with loss reported"


def test_a_ci_log_gets_a_line_per_change_and_progress_at_most_once_an_interval():
    out, clock = io.StringIO(), Clock()
    board = TrialBoard(out, terminal=False, interval=10, clock=clock)
    sweep = {"id": "S", "status": "RUNNING", "reason": "searching: 2 trials, 2 at once"}
    board.show(sweep, _listing(_trial(1, "RUNNING", 0.1, step=1, last=2.0, best=2.0)))
    lines = out.getvalue().splitlines()
    assert lines == [
        "sweep S RUNNING: searching: 2 trials, 2 at once",
        "trial 1 lr-1 RUNNING lr=0.1 type=ddp step 1 loss=2 (best 2)",
    ]
    # The step moved, but within the interval: nothing new; a new trial is a line.
    clock.now = 5
    board.show(
        sweep,
        _listing(
            _trial(1, "RUNNING", 0.1, step=5, last=1.5, best=1.5),
            _trial(2, "QUEUED", 0.01, reason="waiting for a cluster"),
        ),
    )
    assert out.getvalue().splitlines()[2:] == [
        "trial 2 lr-2 QUEUED lr=0.01 type=ddp: waiting for a cluster"
    ]
    # After the interval the progress is shown; a status change at once.
    clock.now = 11
    board.show(
        sweep,
        _listing(
            _trial(1, "RUNNING", 0.1, step=9, last=1.2, best=1.2),
            _trial(2, "CANCELLED", 0.01, step=5, last=3.0, best=3.0, reason="pruned at step 5"),
        ),
    )
    assert out.getvalue().splitlines()[3:] == [
        "trial 1 lr-1 RUNNING lr=0.1 type=ddp step 9 loss=1.2 (best 1.2)",
        "trial 2 lr-2 CANCELLED lr=0.01 type=ddp step 5 loss=3 (best 3): pruned at step 5",
    ]
    assert "\x1b" not in out.getvalue()


def test_a_terminal_gets_the_table_redrawn_in_place_only_when_it_changed():
    out, clock = io.StringIO(), Clock()
    board = TrialBoard(out, terminal=True, interval=10, clock=clock)
    sweep = {"id": "S", "status": "RUNNING", "reason": "searching"}
    listing = _listing(_trial(1, "RUNNING", 0.1, step=1, last=2.0, best=2.0))
    board.show(sweep, listing)
    drawn = out.getvalue()
    assert drawn.startswith("sweep S RUNNING: searching\n")
    assert "\x1b[" not in drawn  # nothing to erase yet
    assert len(board.drawn) == 2  # header and one trial

    clock.now = 1
    board.show(sweep, listing)
    assert out.getvalue() == drawn  # the same table: not redrawn

    clock.now = 2
    board.show(sweep, _listing(_trial(1, "RUNNING", 0.1, step=7, last=1.1, best=1.1)))
    redrawn = out.getvalue()[len(drawn) :]
    assert redrawn.startswith("\x1b[2F\x1b[J")  # up over the old table, cleared
    assert "1.1" in redrawn and redrawn.count("\n") == 2
    # The sweep's end is the caller's to report: the table is drawn, no status line.
    clock.now = 2.1
    done = {"id": "S", "status": "SUCCEEDED", "reason": "1 trial"}
    board.show(done, _listing(_trial(1, "SUCCEEDED", 0.1, step=9, last=1.0, best=1.0)))
    assert "SUCCEEDED: 1 trial" not in out.getvalue()
    assert board.drawn[1].split()[2] == "SUCCEEDED"
