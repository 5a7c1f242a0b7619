"""The built wheel carries what an installed trainplane needs at run time."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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


def test_installed_versions_lie_in_the_declared_ranges():
    """The tests run on constraints.txt's pins; a pin outside what
    pyproject.toml declares (the trl and lightning extras above all) would
    mean the declared range is not the one CI tests."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert {"trl", "lightning"} <= extras.keys()
    declared = [*project["dependencies"], *(line for group in extras.values() for line in group)]
    outside = []
    for line in declared:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) == "trainplane":
            continue  # dev names the other extras
        installed = metadata.version(requirement.name)
        if not requirement.specifier.contains(installed, prereleases=True):
            outside.append(f"{requirement.name} {installed} is not {requirement.specifier}")
    assert not outside, outside


def test_dev_installs_the_trainer_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (self_reference,) = [
        Requirement(line)
        for line in project["optional-dependencies"]["dev"]
        if Requirement(line).name == "trainplane"
    ]
    assert {"trl", "lightning", "runtime"} <= self_reference.extras
