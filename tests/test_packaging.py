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
    # The dashboard's pages and scripts.
    assert {
        "trainplane/dashboard/templates/base.html",
        "trainplane/dashboard/static/app.js",
    } <= names
    assert not any(n.startswith(("tests/", "migrations/")) for n in names)


def test_the_control_plane_and_cli_never_load_torch_or_ray():
    """They run where no GPU stack is installed; only the runtime needs it.
    MLflow (seconds to import) is loaded when tracking first talks to it."""
    code = (
        "import sys, trainplane, trainplane.api.app, trainplane.cli.main, "
        "trainplane.scheduler.loop, trainplane.serve.processes\n"
        "loaded = sorted(m for m in ('torch', 'ray', 'deepspeed', 'mlflow') if m in sys.modules)\n"
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_train_context_is_importable_from_the_package():
    code = (
        "import trainplane\n"
        "from trainplane.runtime.context import TrainContext\n"
        "assert trainplane.TrainContext is TrainContext"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
