"""Benchmarks keep working: the GPU check and the GPU suite where no GPU (and
no Ray) is, in their CPU smoke modes with tiny models; the dashboard page timings on a small
database (every page must answer 200; the times are the benchmark's to judge);
the load test with a few clients for a few seconds, without a single error."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``benchmarks/<script>`` with ``args``; fails the test unless it exits 0."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def test_gpu_check_runs_in_its_cpu_smoke_mode() -> None:
    run = run_benchmark("gpu_check.py", "--device", "cpu", "--small", "--strategies", "ddp,fsdp")
    rows = {
        line.split()[1]: line for line in run.stdout.splitlines() if line.startswith("trainplane ")
    }
    assert set(rows) == {"ddp", "fsdp"}
    for line in rows.values():
        tokens_per_second = float(line.split()[2])
        assert tokens_per_second > 0


def test_gpu_suite_runs_in_its_cpu_smoke_mode_without_ray(tmp_path: Path) -> None:
    # A Python package named ray that cannot be imported: the suite, and each
    # one-worker attempt it runs, must not need Ray.
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text("raise ImportError('no Ray here')\n")
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_suite.py"), "--device", "cpu", "--small"],
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = {
        cells[1].strip(): [c.strip() for c in cells[2:-1]]
        for line in run.stdout.splitlines()
        if line.startswith("| ") and (cells := line.split("|"))[1].strip() != "row"
    }
    assert list(rows) == [
        *("lm ddp", "lm fsdp", "lm zero1", "lm zero2", "lm zero3"),
        *("finetune lora", "finetune full", "command (cpu)"),
    ]
    for name in ("lm ddp", "lm fsdp", "finetune lora", "finetune full"):
        tokens_per_s, _, peak_gb, estimate_gb, _, reload, status = rows[name]
        assert status == "ok", name
        assert float(tokens_per_s) > 0 and float(peak_gb) > 0 and float(estimate_gb) > 0
        assert reload.startswith("loss" if name.startswith("lm") else "logits"), name
    for name in ("lm zero1", "lm zero2", "lm zero3"):
        assert rows[name][-1].startswith("skipped: DeepSpeed on CPU"), name  # said, in the table
    assert rows["command (cpu)"][-1] == "ok"


def test_gpu_overhead_compares_bare_torchrun_and_the_runtime_in_its_cpu_smoke_mode() -> None:
    run = run_benchmark(
        "gpu_overhead.py", "--device", "cpu", "--small", "--steps", "12", "--skip", "2",
        "--repeats", "1", "--json",
    )  # fmt: skip
    summary = json.loads(run.stdout.splitlines()[-1])
    assert set(summary) == {"bare", "runtime"}
    for figures in summary.values():
        assert figures["steps_per_s"] > 0 and figures["first_step_s"] > 0
    assert "trainplane runtime, torchrun" in run.stdout


def test_pooled_ranks_compares_fresh_and_forked_ranks_in_its_smoke_mode() -> None:
    run = run_benchmark(
        "pooled_ranks.py", "--small", "--steps", "12", "--skip", "2", "--repeats", "2", "--json"
    )
    summary = json.loads(run.stdout.splitlines()[-1])
    assert set(summary) == {"fresh", "pool"}
    for figures in summary.values():
        assert figures["steps_per_s"] > 0 and figures["first_step_s"] > 0
    assert "forked from the pool" in run.stdout


def test_dashboard_page_benchmark_loads_every_page() -> None:
    run = run_benchmark("dashboard_pages.py", "--jobs", "500", "--requests", "2")
    pages = [line.split()[0] for line in run.stdout.splitlines() if line.startswith("/")]
    assert pages[:2] == ["/v1/jobs?limit=50", "/"]
    assert {"/clusters", "/usage", "/submit"} <= set(pages)
    assert any(p.startswith("/jobs/") for p in pages) and any(
        p.startswith("/compare") for p in pages
    )
    assert "targets met:" in run.stdout


def test_trace_replay_prints_its_table_for_a_small_trace(tmp_path: Path) -> None:
    # Bursts of small jobs behind 8-GPU gangs, from two projects.
    lines = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for i in range(120):
        gpus = 8 if i % 10 == 0 else 1
        duration = 3600.0 if gpus == 8 else 600.0
        minute, second = divmod(i * 7, 60)
        stamp = f"2017-10-01 00:{minute:02d}:{second:02d}"
        lines.append(f"{stamp},{duration},{gpus},{duration * gpus},{'ab'[i % 2]}")
    trace = tmp_path / "trace.csv"
    trace.write_text("\n".join(lines) + "\n")
    run = run_benchmark("trace_replay.py", "--trace", str(trace), "--nodes", "2")
    rows = [
        [cell.strip() for cell in line.split("|")[1:-1]]
        for line in run.stdout.splitlines()
        if line.startswith("| ")
    ]
    header, table = rows[0], {row[0]: dict(zip(rows[0], row, strict=True)) for row in rows[1:]}
    assert header[1:5] == ["trainplane", "fifo", "easy", "las"]
    assert {"mean JCT (h)", "p99 JCT (h)", "GPU utilization", "makespan (days)"} <= table.keys()
    ours, fifo = (float(table["mean JCT (h)"][policy]) for policy in ("trainplane", "fifo"))
    assert ours < fifo  # backfill lets the small jobs past the blocked gangs
    assert "target" in run.stdout.splitlines()[-1]


def benchmark_module(script: str) -> ModuleType:
    """``benchmarks/<script>`` imported (it runs nothing on import), for its constants."""
    name = f"benchmarks_{Path(script).stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_load_benchmark_runs_every_operation_without_errors() -> None:
    run = run_benchmark(
        "load.py",
        *("--clients", "20", "--seconds", "5", "--baseline-seconds", "2", "--history", "100"),
    )
    # The load's table comes after the baseline's: the last row of an operation wins.
    counts = {
        cells[1].strip(): (int(cells[2]), int(cells[3]))
        for line in run.stdout.splitlines()
        if line.startswith("| ")
        and len(cells := line.split("|")) == 10
        and cells[2].strip().isdigit()
    }
    assert set(counts) == set(benchmark_module("load.py").OPERATIONS)
    for operation, (count, errors) in counts.items():
        assert count > 0, operation
        assert errors == 0, operation
    assert "p99 ratio" in run.stdout
    assert run.stdout.rstrip().endswith("errors: 0")


def test_sweep_savings_runs_both_searches_and_ends_with_json() -> None:
    run = run_benchmark(
        "sweep_savings.py", "--trials", "4", "--steps", "20", "--seeds", "0", "--json"
    )
    result = json.loads(run.stdout.splitlines()[-1])["seeds"]["0"]
    assert result["full"]["steps"] == 4 * 20 and result["full"]["pruned"] == 0
    # Trial 2 onwards meets trial 1 at step 10; with a third kept, some stop there.
    assert result["asha"]["pruned"] >= 1 and result["asha"]["steps"] < 4 * 20
    assert set(result["targets_met"]) == {"best_within_5_percent", "gpu_seconds_half"}
    assert "target: GPU-seconds" in run.stdout
