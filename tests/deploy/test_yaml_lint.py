"""yamllint, strict, over docker-compose.yml and every YAML file under docker/
and deploy/, with the committed .yamllint.yaml."""

from __future__ import annotations

import subprocess

from tests.deploy.conftest import DEPLOY, DOCKER, ROOT, venv_tool


def test_yamllint_finds_nothing():
    files = sorted(p for d in (DOCKER, DEPLOY) for p in (*d.rglob("*.yaml"), *d.rglob("*.yml")))
    files.append(ROOT / "docker-compose.yml")
    assert len(files) >= 10, files
    result = subprocess.run(
        [venv_tool("yamllint"), "--strict", "--config-file", str(ROOT / ".yamllint.yaml")]
        + [str(p) for p in files],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
