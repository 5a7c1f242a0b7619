"""docker/compose.yaml: valid under the Compose Specification's JSON schema,
and the single-machine deployment it promises (pinned images, required
secrets from .env, startup order, one checkpoint volume shared by the control
plane and the Ray nodes)."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest
import yaml

from tests.deploy.conftest import DOCKER, ROOT, project_version
from tests.deploy.schemas import SchemaMissing, compose_schema
from trainplane.cli.cluster_file import read_cluster_file

COMPOSE = DOCKER / "compose.yaml"
SECRETS = ("POSTGRES_PASSWORD", "TRAINPLANE_BOOTSTRAP_TOKEN")
INTERPOLATION = re.compile(r"\$\{(\w+)([^}]*)\}")
CHECKPOINTS = "/data/checkpoints"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def named_mounts(service: dict[str, Any]) -> dict[str, str]:
    """Named volume -> mount path (bind mounts, which start with . or /, left out)."""
    mounts = {}
    for entry in service.get("volumes", []):
        source, target = entry.split(":")[:2]
        if not source.startswith((".", "/", "~")):
            mounts[source] = target
    return mounts


def test_matches_the_compose_specification(compose):
    try:
        schema = compose_schema()
    except SchemaMissing as exc:
        pytest.fail(str(exc))
    errors = sorted(
        jsonschema.Draft201909Validator(schema).iter_errors(compose), key=lambda e: e.json_path
    )
    assert not errors, "\n".join(f"{e.json_path}: {e.message}" for e in errors)


def test_every_image_is_pinned(compose):
    for name, service in compose["services"].items():
        image = service.get("image")
        assert image, f"{name}: no image (a build alone gets an unpredictable name)"
        repository, _, tag = image.rpartition(":")
        assert repository and "/" not in tag, f"{name}: {image} has no tag"
        assert tag != "latest" and re.search(r"\d", tag), f"{name}: {image} is not a version"
        if "build" in service:
            # Images built from this checkout carry its version.
            assert tag == project_version(), f"{name}: {image}, the project is {project_version()}"


def test_secrets_must_come_from_the_env_file(compose):
    text = COMPOSE.read_text()
    used = {name for name, _ in INTERPOLATION.findall(text)}
    assert set(SECRETS) <= used
    for name, rest in INTERPOLATION.findall(text):
        # Nothing silently empty: a secret stops compose when missing
        # (`:?`), anything else has an explicit default (`:-`).
        expected = ":?" if name in SECRETS else (":?", ":-")
        assert rest.startswith(expected), f"${{{name}{rest}}} should use {expected}"
    for service_name, service in compose["services"].items():
        for key, value in environment(service).items():
            if re.search(r"PASSWORD|TOKEN|SECRET|ACCESS_KEY", key):
                assert re.fullmatch(r"\$\{\w+:\?[^}]+\}", value), (
                    f"{service_name}: {key} must be a required variable, not a value in the file"
                )


def test_the_env_file_stays_out_of_git_and_images():
    for ignore in (".gitignore", ".dockerignore"):
        lines = (ROOT / ignore).read_text().splitlines()
        assert "docker/.env" in lines, f"{ignore} must list docker/.env (it holds the secrets)"


def test_volumes_are_declared_and_the_checkpoint_volume_is_shared(compose):
    services = compose["services"]
    used = {v for s in services.values() for v in named_mounts(s)}
    assert used == set(compose.get("volumes") or {}), "every named volume declared, and used"
    for name in ("trainplane", "ray-head", "ray-gpu-worker"):
        assert named_mounts(services[name]).get("checkpoints") == CHECKPOINTS, name
    assert environment(services["trainplane"])["TRAINPLANE_CHECKPOINT_STORAGE"] == CHECKPOINTS


def test_startup_order_and_the_ray_cluster(compose):
    services = compose["services"]

    def after(name: str) -> dict[str, str]:
        return {dep: spec["condition"] for dep, spec in services[name]["depends_on"].items()}

    assert after("migrate") == {"postgres": "service_healthy"}
    assert after("trainplane")["migrate"] == "service_completed_successfully"
    assert after("trainplane")["postgres"] == "service_healthy"
    assert after("trainplane")["mlflow"] == "service_healthy"
    assert after("register")["trainplane"] == "service_healthy"
    assert services["migrate"]["command"] == ["trainplane", "db", "upgrade"]
    assert "--workers=1" in services["mlflow"]["command"]

    head = services["ray-head"]["command"]
    assert head[:2] == ["ray", "start"] and {"--head", "--block", "--num-gpus=0"} <= set(head)
    worker = services["ray-gpu-worker"]
    assert {"--address=ray-head:6379", "--block"} <= set(worker["command"])
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]

    env = environment(services["trainplane"])
    assert env["TRAINPLANE_ADVERTISE_URL"] == "http://trainplane:8080"
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"


def test_the_registration_applies_the_local_cluster(compose):
    register = compose["services"]["register"]
    assert register["command"][:3] == ["trainplane", "clusters", "apply"]
    mount = next(v for v in register["volumes"] if v.startswith("./clusters.yaml:"))
    assert mount.split(":")[1] == register["command"][3]
    assert environment(register)["TRAINPLANE_URL"] == "http://trainplane:8080"
    (cluster,) = read_cluster_file(DOCKER / "clusters.yaml")
    assert cluster["address"] == "http://ray-head:8265"
