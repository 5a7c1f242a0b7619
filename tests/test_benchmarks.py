"""The GPU check must keep working where no GPU (and no Ray) is: its CPU smoke
mode runs the same code path with a tiny model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_runs_in_its_cpu_smoke_mode() -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_check.py"),
            "--device",
            "cpu",
            "--small",
            "--strategies",
            "ddp,fsdp",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {
        line.split()[1]: line for line in run.stdout.splitlines() if line.startswith("trainplane ")
    }
    assert set(rows) == {"ddp", "fsdp"}
    for line in rows.values():
        tokens_per_second = float(line.split()[2])
        assert tokens_per_second > 0
