"""The pure parts of the CI-facing CLI, without a server: progress lines for a
CI log, ``--fail-on`` gates, idempotency keys from CI variables, ``--set``."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime, timedelta

import pytest

from tests.cli.ci_env import GITHUB, GITLAB
from trainplane.cli.ci import MissingCiVariables, derive_key
from trainplane.cli.gates import Gate, GateSyntaxError
from trainplane.cli.progress import ProgressPrinter, duration
from trainplane.sdk.specfile import SpecFileError, apply_override

ANSI = re.compile(r"\x1b\[")
T0 = datetime(2030, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def running(step: int, total: int | None, at: float, **metrics: float) -> dict:
    return {
        "id": "J1",
        "status": "RUNNING",
        "reason": "running on local",
        "progress": {
            "attempt": 1,
            "step": step,
            "total_steps": total,
            "last_heartbeat_at": (T0 + timedelta(seconds=at)).isoformat(),
            "last_progress_at": (T0 + timedelta(seconds=at)).isoformat(),
        },
        "latest_metrics": metrics,
    }


def plain_printer(interval: float = 15.0, **kwargs) -> tuple[ProgressPrinter, io.StringIO, Clock]:
    stream, clock = io.StringIO(), Clock()
    return (
        ProgressPrinter(stream, terminal=False, interval=interval, clock=clock, **kwargs),
        stream,
        clock,
    )


def test_plain_progress_is_paced_and_has_step_loss_rate_and_eta():
    printer, stream, clock = plain_printer(15.0)
    for second in range(61):  # one step a second, one poll a second
        clock.now = 1000.0 + second
        printer.update(running(second + 1, 1000, at=second, loss=1.0 / (second + 1)))
    status, *lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and not ANSI.search(stream.getvalue())
    assert status == "job J1 RUNNING: running on local"
    # One at the first step, then one per 15 s: never one per poll.
    assert [line.split()[1] for line in lines] == [
        "1/1000",
        "16/1000",
        "31/1000",
        "46/1000",
        "61/1000",
    ]
    assert lines[0] == "step 1/1000 (0%) loss=1"
    assert lines[-1] == "step 61/1000 (6%) loss=0.01639 1.00 steps/s ETA 15m39s"


def test_a_big_step_jump_is_shown_before_the_interval_and_a_stall_is_visible():
    printer, stream, clock = plain_printer(10.0)
    printer.update(running(1, 100, at=0))
    clock.now += 2
    printer.update(running(30, 100, at=2))  # 29% of the run in 2 s
    for _ in range(50):  # then nothing moves for 50 s
        clock.now += 1
        printer.update(running(30, 100, at=2))
    lines = stream.getvalue().splitlines()[1:]  # after the status line
    assert [line.split()[1] for line in lines] == ["1/100", "30/100", "30/100"]
    assert lines[-1].endswith("(no new step for 40s)")


def test_status_changes_are_lines_with_their_reason_and_a_long_queue_wait_reminds():
    printer, stream, clock = plain_printer(5.0)
    queued = {"id": "J1", "status": "QUEUED", "reason": "waiting for 8 GPUs", "progress": None}
    printer.update(queued)
    clock.now += 19
    printer.update(queued)  # not yet: 4 intervals
    clock.now += 2
    printer.update(queued)
    printer.update({**queued, "status": "SUCCEEDED", "reason": "done"}, terminal_status=True)
    assert stream.getvalue().splitlines() == [
        "job J1 QUEUED: waiting for 8 GPUs",
        "job J1 still QUEUED after 21s: waiting for 8 GPUs",
    ]


def test_a_new_attempt_restarts_the_rate():
    printer, stream, clock = plain_printer(0.0)
    printer.update(running(10, 100, at=0))
    clock.now += 1
    printer.update(running(20, 100, at=10))  # 1 step/s
    restarted = running(12, 100, at=100)
    restarted["progress"]["attempt"] = 2
    clock.now += 1
    printer.update(restarted)
    lines = stream.getvalue().splitlines()[1:]
    assert lines[1].endswith("1.00 steps/s ETA 1m20s")
    assert "steps/s" not in lines[2]  # one point of the new attempt: no rate yet


def test_gate_metrics_are_shown_and_a_terminal_line_is_redrawn():
    stream, clock = io.StringIO(), Clock()
    printer = ProgressPrinter(stream, terminal=True, clock=clock, metrics=["perplexity"])
    printer.update(running(1, 10, at=0, loss=2.0, eval_loss=2.5, perplexity=12.5))
    clock.now += 1
    printer.update(running(2, 10, at=1, loss=1.0))
    printer.close()
    text = stream.getvalue()
    assert text.count("\r\x1b[K") == 2 and text.endswith("\n")
    assert "loss=2 eval_loss=2.5 perplexity=12.5" in text


@pytest.mark.parametrize(
    ("seconds", "shown"), [(0.4, "0s"), (59, "59s"), (61, "1m01s"), (3600 * 2 + 120, "2h02m")]
)
def test_durations(seconds, shown):
    assert duration(seconds) == shown


@pytest.mark.parametrize(
    ("expression", "metrics", "passed"),
    [
        ("eval_loss>2.0", {"eval_loss": 2.5}, False),
        ("eval_loss>2.0", {"eval_loss": 2.0}, True),
        ("perplexity >= 12", {"perplexity": 12.0}, False),
        ("accuracy<0.9", {"accuracy": 0.95}, True),
        ("accuracy<=0.9", {"accuracy": 0.9}, False),
        ("eval/loss==1e-3", {"eval/loss": 0.001}, False),
        ("steps!=100", {"steps": 100.0}, True),
        ("eval_loss>2", {"loss": 1.0}, False),  # never reported: fails
    ],
)
def test_gates(expression, metrics, passed):
    result = Gate.parse(expression).check(metrics)
    assert result.passed is passed
    if not metrics.get(Gate.parse(expression).metric):
        assert "never reported" in result.message


@pytest.mark.parametrize(
    "bad", ["eval_loss", "eval_loss>", "eval_loss=>2", "loss > two", "2>loss", ""]
)
def test_bad_gates_are_refused(bad):
    with pytest.raises(GateSyntaxError, match="METRIC OP NUMBER"):
        Gate.parse(bad)


def key(env, spec=None):
    derived = derive_key(env, spec or {"name": "a"})
    return derived and derived.key


def test_keys_from_ci_variables():
    first = key(GITHUB)
    assert re.fullmatch(r"ci-github-9001-[0-9a-f]{32}", first)
    assert key({**GITHUB, "GITHUB_RUN_ATTEMPT": "2"}) == first
    assert key({**GITHUB, "GITHUB_RUN_ID": "9002"}) != first
    assert key({**GITHUB, "GITHUB_JOB": "other"}) != first
    assert key(GITHUB, {"name": "b"}) != first
    # Key order in the spec does not matter; its content does.
    assert key(GITHUB, {"x": 1, "y": 2}) == key(GITHUB, {"y": 2, "x": 1})

    gitlab = key(GITLAB)
    assert re.fullmatch(r"ci-gitlab-777-[0-9a-f]{32}", gitlab)
    assert key({**GITLAB, "CI_JOB_ID": "2"}) == gitlab
    assert key({**GITLAB, "CI_JOB_NAME": "train 2/2"}) != gitlab

    generic = key({**GITHUB, "TRAINPLANE_CI_RUN_ID": "build 5/attempt 2"})
    assert re.fullmatch(r"ci-run-build_5_attempt_2-[0-9a-f]{32}", generic)
    assert key({}) is None and key({"GITHUB_ACTIONS": "false"}) is None


def test_ci_without_its_variables_says_which_are_missing():
    with pytest.raises(MissingCiVariables, match="GITHUB_RUN_ID is not set"):
        derive_key({**GITHUB, "GITHUB_RUN_ID": ""}, {})


def test_set_nested_list_and_indexed_values():
    spec = {"entrypoint": {"command": ["python", "train.py"]}, "method": {"type": "lora"}}
    apply_override(spec, "method.target_modules=[q_proj, v_proj]")
    apply_override(spec, "method.lora.r=16")
    apply_override(spec, "entrypoint.command.1=other.py")
    apply_override(spec, "entrypoint.command.2=--fast")
    apply_override(spec, "entrypoint.env={SEED: 3}")
    apply_override(spec, "name=")
    assert spec == {
        "entrypoint": {"command": ["python", "other.py", "--fast"], "env": {"SEED": 3}},
        "method": {"type": "lora", "target_modules": ["q_proj", "v_proj"], "lora": {"r": 16}},
        "name": "",
    }


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("resources", "expected key=value"),
        ("entrypoint.command.5=x", "entrypoint.command is a list of 2; '5' is not an index"),
        ("entrypoint.command.first=x", "'first' is not an index"),
        ("name.first=x", "name is a string, so it has no field 'first'"),
        ("resources..gpus=1", "empty field name"),
        ("resources.gpus=[1", "cannot read the value"),
    ],
)
def test_set_errors_name_the_field(override, message):
    spec = {"name": "a", "entrypoint": {"command": ["python", "train.py"]}}
    with pytest.raises(SpecFileError, match=re.escape(message)):
        apply_override(spec, override)


def test_a_spec_files_working_dir_resolves_against_it_unless_it_runs_a_bundle(tmp_path):
    from trainplane.sdk.specfile import load_spec_file

    folder = tmp_path / "job"
    folder.mkdir()
    spec = folder / "job.yaml"
    spec.write_text("kind: train\nname: a\nentrypoint: {function: t:f, working_dir: src}\n")
    assert load_spec_file(spec, [])["entrypoint"]["working_dir"] == str(folder / "src")
    digest = "sha256:" + "0" * 64
    spec.write_text(f"kind: train\nname: a\nentrypoint: {{function: t:f, code: '{digest}'}}\n")
    assert "working_dir" not in load_spec_file(spec, [])["entrypoint"]
