"""docker-compose.yml: valid under the Compose Specification's JSON schema,
and the single-machine deployment it promises (pinned images, required
secrets from .env, startup order, one checkpoint volume shared by the control
plane and the Ray nodes, MLflow's store in the compose PostgreSQL); and
docker/compose.cpu.yaml, its override for a machine without a GPU: valid as
well, alone and merged, and changing only what a CPU-only run needs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
import pytest
import yaml

from tests.deploy.conftest import DOCKER, ROOT, project_version
from tests.deploy.schemas import SchemaMissing, compose_schema
from tests.deploy.test_dockerfiles import instructions
from trainplane.cli.cluster_file import read_cluster_file

COMPOSE = ROOT / "docker-compose.yml"
CPU_OVERRIDE = DOCKER / "compose.cpu.yaml"
SECRETS = ("POSTGRES_PASSWORD", "TRAINPLANE_BOOTSTRAP_TOKEN")
INTERPOLATION = re.compile(r"\$\{(\w+)([^}]*)\}")
CHECKPOINTS = "/data/checkpoints"
INITDB = "/docker-entrypoint-initdb.d/"


class Reset:
    """An override file's `!reset`: Compose drops the key from the merged model."""


RESET = Reset()


class ComposeLoader(yaml.SafeLoader):
    """safe_load, plus the Compose Specification's `!reset` (whose value Compose
    ignores). Any other tag still fails to load."""


ComposeLoader.add_constructor("!reset", lambda loader, node: RESET)


def load(path: Path) -> dict[str, Any]:
    return yaml.load(path.read_text(), Loader=ComposeLoader)


def without_resets(tree: Any) -> Any:
    """A file as Compose validates it: reset keys are gone before the schema runs."""
    if isinstance(tree, dict):
        return {k: without_resets(v) for k, v in tree.items() if v is not RESET}
    if isinstance(tree, list):
        return [without_resets(v) for v in tree]
    return tree


def merge(base: Any, override: Any, path: tuple[str, ...] = ()) -> Any:
    """Compose's merge rules, as far as these files use them: mappings merge key
    by key and `!reset` removes one; a command replaces the base's; a service's
    volumes merge by target; other sequences append."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            if value is RESET:
                merged.pop(key, None)
            else:
                merged[key] = merge(merged[key], value, (*path, key)) if key in merged else value
        return merged
    if isinstance(base, list) and isinstance(override, list):
        if path[-1] in ("command", "entrypoint"):
            return override
        if path[0] == "services" and path[2:] == ("volumes",):
            return list({entry.split(":")[1]: entry for entry in (*base, *override)}.values())
        return base + override
    return override


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load(COMPOSE)


@pytest.fixture(scope="module")
def cpu_override() -> dict[str, Any]:
    return load(CPU_OVERRIDE)


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


def flag(command: list[str], name: str) -> str:
    (value,) = [arg.split("=", 1)[1] for arg in command if arg.startswith(f"{name}=")]
    return value


@pytest.mark.parametrize("which", ["docker-compose.yml", "compose.cpu.yaml", "merged"])
def test_matches_the_compose_specification(compose, cpu_override, which):
    try:
        schema = compose_schema()
    except SchemaMissing as exc:
        pytest.fail(str(exc))
    model = {
        "docker-compose.yml": compose,
        "compose.cpu.yaml": cpu_override,
        "merged": merge(compose, cpu_override),
    }[which]
    errors = sorted(
        jsonschema.Draft201909Validator(schema).iter_errors(without_resets(model)),
        key=lambda e: e.json_path,
    )
    assert not errors, "\n".join(f"{e.json_path}: {e.message}" for e in errors)


def test_relative_paths_resolve_from_the_repository_root(compose, cpu_override):
    # Compose resolves the relative paths of every -f file from the first
    # file's folder, here the root, override files included.
    for service_name, service in (*compose["services"].items(), *cpu_override["services"].items()):
        build = service.get("build")
        if build:
            context = ROOT / build["context"]
            dockerfile = context / build.get("dockerfile", "Dockerfile")
            assert dockerfile.is_file(), f"{service_name}: no {dockerfile.relative_to(ROOT)}"
        for entry in service.get("volumes", []):
            source = entry.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).is_file(), f"{service_name}: {source} does not exist"


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
    # Compose reads .env from the project folder, the root.
    gitignore = (ROOT / ".gitignore").read_text().splitlines()
    assert ".env" in gitignore, ".gitignore must list .env (it holds the secrets)"
    dockerignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert {".env", "**/.env"} & set(dockerignore), ".dockerignore must leave .env out"


def test_volumes_are_declared_and_the_checkpoint_volume_is_shared(compose):
    services = compose["services"]
    used = {v for s in services.values() for v in named_mounts(s)}
    assert used == set(compose.get("volumes") or {}), "every named volume declared, and used"
    for name in ("trainplane", "ray-head", "ray-worker"):
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
    assert after("mlflow") == {"postgres": "service_healthy"}
    assert services["migrate"]["command"] == ["trainplane", "db", "upgrade"]

    head = services["ray-head"]["command"]
    assert head[:2] == ["ray", "start"] and {"--head", "--block", "--num-gpus=0"} <= set(head)
    worker = services["ray-worker"]
    assert {"--address=ray-head:6379", "--block"} <= set(worker["command"])
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]

    env = environment(services["trainplane"])
    assert env["TRAINPLANE_ADVERTISE_URL"] == "http://trainplane:8080"
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"


def test_the_registration_applies_the_local_cluster(compose):
    register = compose["services"]["register"]
    assert register["command"][:3] == ["trainplane", "clusters", "apply"]
    mount = next(v for v in register["volumes"] if v.startswith("./docker/clusters.yaml:"))
    assert mount.split(":")[1] == register["command"][3]
    assert environment(register)["TRAINPLANE_URL"] == "http://trainplane:8080"
    (cluster,) = read_cluster_file(DOCKER / "clusters.yaml")
    assert cluster["address"] == "http://ray-head:8265"


def test_waited_on_services_have_a_healthcheck(compose):
    services = compose["services"]
    for name, service in services.items():
        for dependency, spec in service.get("depends_on", {}).items():
            if spec["condition"] != "service_healthy":
                continue
            target = services[dependency]
            if "healthcheck" in target:
                continue
            # Otherwise the image's own HEALTHCHECK, for one built here.
            build = target.get("build")
            assert build, f"{name} waits on {dependency}, which has no healthcheck"
            dockerfile = ROOT / build["context"] / build.get("dockerfile", "Dockerfile")
            keywords = [keyword for keyword, _ in instructions(dockerfile)]
            assert "HEALTHCHECK" in keywords, f"{name} waits on {dependency}: no HEALTHCHECK"


def test_mlflow_keeps_its_store_in_the_compose_postgresql(compose):
    services = compose["services"]
    mlflow, postgres = services["mlflow"], services["postgres"]
    assert mlflow["build"]["context"] == "./docker/mlflow"
    store = urlparse(flag(mlflow["command"], "--backend-store-uri"))
    assert store.scheme == "postgresql" and (store.hostname, store.port) == ("postgres", 5432)
    assert store.username == environment(postgres)["POSTGRES_USER"]
    # The password reaches libpq as PGPASSWORD, never inside the URI.
    assert store.password is None
    assert environment(mlflow)["PGPASSWORD"] == environment(postgres)["POSTGRES_PASSWORD"]
    database = store.path.removeprefix("/")
    assert database and database != environment(postgres)["POSTGRES_DB"], "a database of its own"

    (script,) = [v for v in postgres["volumes"] if v.split(":")[1].startswith(INITDB)]
    source, target = script.split(":")[:2]
    assert target.endswith(".sql") and script.endswith(":ro")
    sql = (ROOT / source).read_text()
    assert re.search(rf"^CREATE DATABASE {database};$", sql, re.MULTILINE), source

    artifacts = flag(mlflow["command"], "--artifacts-destination")
    assert named_mounts(mlflow) == {"mlflow-artifacts": artifacts}
    assert "mlflow:5000" in flag(mlflow["command"], "--allowed-hosts").split(",")


def test_the_cpu_override_changes_only_what_a_cpu_run_needs(compose, cpu_override):
    assert set(cpu_override) == {"services"}
    assert set(cpu_override["services"]) == {"ray-worker", "register"}
    assert set(cpu_override["services"]["ray-worker"]) == {"deploy", "command"}
    assert set(cpu_override["services"]["register"]) == {"volumes"}
    # Nothing secret, nothing to interpolate: the base file holds all of it.
    assert not INTERPOLATION.search(CPU_OVERRIDE.read_text())

    merged = merge(compose, cpu_override)
    services = merged["services"]
    for name, service in services.items():
        if name not in cpu_override["services"]:
            assert service == compose["services"][name], name

    worker = services["ray-worker"]
    assert "deploy" not in worker, "the GPU reservation must go: no NVIDIA runtime to satisfy it"
    base_command = compose["services"]["ray-worker"]["command"]
    assert worker["command"][: len(base_command)] == base_command, "the same worker, flags added"
    assert "--num-gpus=0" in worker["command"]
    num_cpus = int(flag(worker["command"], "--num-cpus"))
    assert named_mounts(worker) == named_mounts(compose["services"]["ray-worker"])

    register = services["register"]
    (mount,) = [v for v in register["volumes"] if v.split(":")[1] == register["command"][3]]
    assert mount.split(":")[0] == "./docker/clusters.cpu.yaml"
    (cluster,) = read_cluster_file(ROOT / mount.split(":")[0])
    (gpu_cluster,) = read_cluster_file(DOCKER / "clusters.yaml")
    assert cluster["accelerator"] == "cpu"
    # The same cluster, updated in place when moving between the two files.
    assert (cluster["name"], cluster["address"]) == (gpu_cluster["name"], gpu_cluster["address"])
    # A CPU cluster's slots take one CPU each: as many as the worker has.
    assert cluster["gpus"] == num_cpus
