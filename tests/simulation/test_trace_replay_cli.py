"""benchmarks/trace_replay.py as its users run it: on a trace file in the
Philly format and on a synthetic mix, every policy side by side, the JSON
line last; and the synthetic mixes themselves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainplane.simulation.summary import JSON_FIELDS
from trainplane.simulation.synthetic import MIXES, synthetic_trace, write_philly_csv
from trainplane.simulation.trace import read_philly

ROOT = Path(__file__).resolve().parents[2]


def run_replay(*args: str) -> tuple[list[str], dict]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "trace_replay.py"), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = done.stdout.splitlines()
    return lines, json.loads(lines[-1])


def test_a_trace_file_replays_under_every_policy_with_the_json_last(tmp_path: Path) -> None:
    trace = tmp_path / "small.csv"
    write_philly_csv(synthetic_trace("long_single", seed=1)[:60], trace)
    lines, figures = run_replay(
        *("--trace", str(trace), "--nodes", "1", "--gpus-per-node", "8"),
        *("--estimate-factor", "0", "--checkpoint-minutes", "20", "--restart-overhead", "30"),
    )
    assert set(figures) == {"policies"}
    assert set(figures["policies"]) == {"trainplane", "fifo", "easy", "las"}
    for name, values in figures["policies"].items():
        assert set(values) == set(JSON_FIELDS), name
        assert 0 < values["utilization"] <= 1
        assert values["mean_jct_hours"] >= values["mean_wait_hours"]
    assert figures["policies"]["fifo"]["preemptions"] == 0
    text = "\n".join(lines)
    assert "| metric | trainplane | fifo | easy | las | trainplane / FIFO |" in text
    assert "| GPU-hours lost to preemption |" in text
    assert "large gangs (" in text


def test_a_synthetic_mix_replays_in_place_of_a_file() -> None:
    lines, figures = run_replay(
        *("--synthetic", "gang_heavy", "--seed", "3", "--days", "1", "--load-scale", "1.3"),
        *("--policies", "fifo,las"),
    )
    assert set(figures["policies"]) == {"fifo", "las"}
    assert "synthetic mix gang_heavy (seed 3, load x1.3) on 8 x 8 = 64 GPUs" in lines[0]


@pytest.mark.parametrize("name", sorted(MIXES))
def test_each_mix_is_seeded_and_round_trips_the_philly_format(name: str, tmp_path: Path) -> None:
    jobs = synthetic_trace(name, seed=7)
    assert jobs == synthetic_trace(name, seed=7)
    assert jobs != synthetic_trace(name, seed=8)
    assert [job.submit for job in jobs] == sorted(job.submit for job in jobs)
    mix = MIXES[name]
    assert {job.project for job in jobs} == {project.name for project in mix.projects}
    assert max(job.gpus for job in jobs) <= mix.nodes * mix.gpus_per_node
    path = tmp_path / "mix.csv"
    write_philly_csv(jobs[:50], path)
    assert [(j.submit, j.duration, j.gpus, j.project) for j in read_philly(path)] == [
        (j.submit, j.duration, j.gpus, j.project) for j in jobs[:50]
    ]


def test_a_mix_at_a_higher_load_offers_more_jobs_over_the_same_days() -> None:
    base = synthetic_trace("heavy_tail", seed=3)
    heavier = synthetic_trace("heavy_tail", seed=3, load_scale=1.3)
    assert heavier == synthetic_trace("heavy_tail", seed=3, load_scale=1.3)
    assert len(heavier) == pytest.approx(1.3 * len(base), rel=0.01)
    span = MIXES["heavy_tail"].days * 86400
    assert max(job.submit for job in heavier) <= span
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="load_scale"):
            synthetic_trace("heavy_tail", load_scale=bad)


def test_the_load_scale_is_refused_for_a_trace_file_with_a_message_naming_it(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "small.csv"
    write_philly_csv(synthetic_trace("long_single", seed=1)[:5], trace)
    replay = [sys.executable, str(ROOT / "benchmarks" / "trace_replay.py")]
    done = subprocess.run(
        [*replay, "--trace", str(trace), "--load-scale", "1.3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--load-scale applies to --synthetic mixes only" in done.stderr


def test_the_long_single_mix_is_mostly_single_gpu_with_a_few_8_gpu_gangs() -> None:
    jobs = synthetic_trace("long_single", seed=0)
    singles = sum(1 for job in jobs if job.gpus == 1) / len(jobs)
    assert 0.9 < singles < 1
    assert {job.gpus for job in jobs} == {1, 8}
    assert sorted(job.duration for job in jobs)[len(jobs) // 2] > 2 * 3600
