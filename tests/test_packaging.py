"""The built wheel carries what an installed trainplane needs at run time."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contains_the_migrations(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("trainplane-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "trainplane/migrations/env.py" in names
    assert "trainplane/migrations/script.py.mako" in names
    shipped = {
        n.rsplit("/", 1)[1] for n in names if n.startswith("trainplane/migrations/versions/")
    }
    in_checkout = {p.name for p in (ROOT / "migrations" / "versions").glob("*.py")}
    assert in_checkout <= shipped
    assert "trainplane/api/app.py" in names
    assert not any(n.startswith(("tests/", "migrations/")) for n in names)
