"""Benchmarks keep working: the GPU check where no GPU (and no Ray) is, in its
CPU smoke mode with a tiny model; the dashboard page timings on a small
database (every page must answer 200; the times are the benchmark's to judge)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_dashboard_page_benchmark_loads_every_page() -> None:
    run = run_benchmark("dashboard_pages.py", "--jobs", "500", "--requests", "2")
    pages = [line.split()[0] for line in run.stdout.splitlines() if line.startswith("/")]
    assert pages[:2] == ["/v1/jobs?limit=50", "/"]
    assert {"/clusters", "/usage", "/submit"} <= set(pages)
    assert any(p.startswith("/jobs/") for p in pages) and any(
        p.startswith("/compare") for p in pages
    )
    assert "targets met:" in run.stdout
