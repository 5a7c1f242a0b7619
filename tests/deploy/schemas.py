"""Published schemas the deployment tests validate against, fetched once by
``scripts/setup`` (``python tests/deploy/schemas.py``) from a package registry
and read from ``.cache/`` by the tests, which never touch the network.

- The Compose Specification's JSON schema, as Docker shipped it in the
  docker-compose 1.29.2 wheel on PyPI (``compose/config/compose_spec.json``).
  It predates a few later spec additions (top-level ``name``, ``configs.content``),
  so docker-compose.yml and docker/compose.cpu.yaml keep to what it describes.
- The Kubernetes schemas come with the ``kubernetes-validate`` package itself.
- No registry (PyPI, npm, Debian) carries KubeRay's CRD schema, so RayClusters
  are checked against ``kuberay_schema.py``, written from KubeRay's API
  reference (its pod templates against Kubernetes' own schema).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "deploy-schemas"

COMPOSE_PACKAGE = "docker-compose==1.29.2"
COMPOSE_MEMBER = "compose/config/compose_spec.json"
COMPOSE_SCHEMA = CACHE / "docker-compose-1.29.2" / "compose_spec.json"


class SchemaMissing(Exception):
    pass


def compose_schema() -> dict:
    if not COMPOSE_SCHEMA.is_file():
        raise SchemaMissing(
            f"{COMPOSE_SCHEMA.relative_to(ROOT)} is missing: run ./scripts/setup, which fetches "
            f"it from PyPI ({COMPOSE_PACKAGE})"
        )
    return json.loads(COMPOSE_SCHEMA.read_text())


def fetch() -> None:
    if COMPOSE_SCHEMA.is_file():
        return
    with tempfile.TemporaryDirectory() as tmp:
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        subprocess.run([*pip, "--only-binary", ":all:", "--dest", tmp, COMPOSE_PACKAGE], check=True)
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            schema = archive.read(COMPOSE_MEMBER)
    json.loads(schema)  # a broken download must not be cached
    COMPOSE_SCHEMA.parent.mkdir(parents=True, exist_ok=True)
    COMPOSE_SCHEMA.write_bytes(schema)
    print(f"setup: {COMPOSE_SCHEMA.relative_to(ROOT)} from {COMPOSE_PACKAGE}", file=sys.stderr)


if __name__ == "__main__":
    fetch()
