"""A client-only install of the checkout: its wheel, without extras, in a
virtual environment of its own, as a CI runner installs ``trainplane``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# What the client must never pull: the server's, the runtime's and tracking's stacks.
SERVER_SIDE = {"fastapi", "uvicorn", "sqlalchemy", "alembic", "psycopg", "mlflow", "boto3", "ray"}
SERVER_SIDE |= {"torch", "cryptography", "jinja2", "optuna", "pydantic-settings"}


PIP_WHEEL = (sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation")
PIP_INSTALL = ("-m", "pip", "install", "-q", "--disable-pip-version-check")
PIP_INSTALL += ("-c", str(ROOT / "constraints.txt"))


def install_client(where: Path) -> Path:
    """The ``bin`` folder of a new environment with only ``trainplane`` (no
    extras) and what it depends on, at the versions CI tests."""
    wheels = where / "wheels"
    subprocess.run(
        [*PIP_WHEEL, "-w", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("trainplane-*.whl")
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [str(venv / "bin" / "python"), *PIP_INSTALL, str(wheel)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return venv / "bin"


def installed(bin_dir: Path) -> set[str]:
    """The distributions in the environment, by normalized name, without pip's own."""
    listing = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "list", "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    names = {entry["name"].lower().replace("_", "-") for entry in json.loads(listing.stdout)}
    return names - {"pip", "setuptools", "wheel"}
