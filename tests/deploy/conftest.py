"""Shared by the deployment tests: where things are, and each kustomize
overlay rendered once per session."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
DEPLOY = ROOT / "deploy"
KUSTOMIZE = DEPLOY / "kustomize"
OVERLAYS = sorted(p.parent for p in (KUSTOMIZE / "overlays").glob("*/kustomization.yaml"))
# The Secret every manifest reads; users create it, the manifests never hold it.
SECRET_NAME = "trainplane-secrets"


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def venv_tool(name: str) -> str:
    """A command-line tool installed by the dev extra, next to this Python."""
    path = Path(sys.executable).parent / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: run ./scripts/setup (it comes with the dev extra)")
    return found


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail(
            "kubectl is not on PATH: the kustomize tests render every overlay with "
            "`kubectl kustomize` (kubectl 1.27+ carries kustomize 5); install kubectl"
        )
    return found


def render(directory: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    if result.returncode != 0:
        pytest.fail(f"kubectl kustomize {directory.relative_to(ROOT)} failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict[str, Any]]]:
    """Every overlay's objects, by overlay name."""
    assert len(OVERLAYS) >= 2, "expected at least two overlays under deploy/kustomize/overlays"
    return {overlay.name: render(overlay) for overlay in OVERLAYS}


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs inside a workload object, whatever its kind."""
    spec = obj.get("spec", {})
    if obj["kind"] == "RayCluster":
        groups = [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]
        return [group["template"]["spec"] for group in groups]
    if obj["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
        return [spec["template"]["spec"]]
    return []


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        c for pod in pod_specs(obj) for c in (*pod.get("initContainers", []), *pod["containers"])
    ]
