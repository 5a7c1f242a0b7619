"""docker/*.Dockerfile and docker/*/Dockerfile: hadolint finds nothing, and
the images are what the deployment relies on (pinned bases, non-root users,
torch only from the PyTorch base, the same versions everywhere)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.conftest import DOCKER, ROOT, venv_tool

CONTROL_PLANE = DOCKER / "control-plane.Dockerfile"
WORKER = DOCKER / "worker.Dockerfile"
MLFLOW = DOCKER / "mlflow" / "Dockerfile"
# Every image's recipe: the two built from the checkout's root, and those whose
# build context is their own folder.
DOCKERFILES = sorted((*DOCKER.glob("*.Dockerfile"), *DOCKER.glob("*/Dockerfile")))
CONSTRAINTS = DOCKER / "constraints.txt"
# MLflow tags its releases with a leading v.
EXACT_TAG = re.compile(r"^[\w./-]+:v?\d+(\.\d+)+[\w.-]*$")
EXACT_PIN = re.compile(r"^([\w.-]+)==(\d+(\.\d+)+)$")


def instructions(path: Path) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) of each instruction, continuation lines joined."""
    result: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += stripped.removesuffix("\\").strip() + " "
        if not stripped.endswith("\\"):
            keyword, _, args = pending.strip().partition(" ")
            result.append((keyword.upper(), args))
            pending = ""
    return result


def stages(path: Path) -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for keyword, args in instructions(path):
        if keyword == "FROM":
            found.append([])
        if found:
            found[-1].append((keyword, args))
    return found


def arg_default(path: Path, name: str) -> str:
    for keyword, args in instructions(path):
        if keyword == "ARG" and args.startswith(f"{name}="):
            return args.split("=", 1)[1].strip('"')
    raise AssertionError(f"{path.name} has no ARG {name}=...")


def pins() -> dict[str, str]:
    found = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and re.fullmatch(r"[\w.!+-]+", version), f"not an exact pin: {line}"
            found[canonicalize_name(name)] = version
    return found


def test_hadolint_finds_nothing():
    assert {CONTROL_PLANE, WORKER, MLFLOW} <= set(DOCKERFILES)
    result = subprocess.run(
        [venv_tool("hadolint"), "--config", str(ROOT / ".hadolint.yaml"), "--no-color"]
        + [str(p) for p in DOCKERFILES],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_base_images_are_exact_versions_and_final_stages_run_as_non_root():
    for path in DOCKERFILES:
        where = path.relative_to(ROOT)
        built = stages(path)
        if path in (CONTROL_PLANE, WORKER):
            assert len(built) >= 2, f"{where}: expected a build stage and a final stage"
        for stage in built:
            image = stage[0][1].split()[0]
            assert EXACT_TAG.match(image) and "latest" not in image, f"{where}: FROM {image}"
        users = [args for keyword, args in built[-1] if keyword == "USER"]
        assert users, f"{where}: the final stage sets no USER"
        # Numeric, so that Kubernetes' runAsNonRoot can verify it.
        assert re.fullmatch(r"\d+(:\d+)?", users[-1]), f"{where}: USER {users[-1]}"
        assert users[-1].split(":")[0] != "0", f"{where}: runs as {users[-1]}"


def test_control_plane_image():
    final = dict(stages(CONTROL_PLANE)[-1])
    assert final["CMD"] == (
        '["trainplane", "server", "--host", "0.0.0.0", "--port", "8080", "--workers", "1"]'
    )
    assert "/healthz" in final["HEALTHCHECK"]
    installs = [a for k, a in instructions(CONTROL_PLANE) if k == "RUN" and "pip install" in a]
    assert installs, "the control plane installs nothing?"
    for command in installs:
        # No training here: not the runtime extra, and never torch.
        assert "[runtime]" not in command and "torch==" not in command
    assert "find_spec('torch') is not None" in " ".join(installs)


def test_worker_image():
    build, final = stages(WORKER)
    devel = build[0][1].split()[0]
    runtime = final[0][1].split()[0]
    assert devel.startswith("pytorch/pytorch:") and devel.endswith("-devel")
    # Ops compiled against the devel image's torch run against the runtime's.
    assert runtime == devel.removesuffix("-devel") + "-runtime"
    assert arg_default(WORKER, "TORCH_CUDA_ARCH_LIST") == "8.0;9.0"
    build_text = " ".join(args for _, args in build)
    assert "DS_BUILD_OPS=0" in build_text
    for op in ("CPU_ADAM", "FUSED_ADAM", "UTILS"):
        assert f"DS_BUILD_{op}=1" in build_text
    # Those need libraries the image does not install.
    for op in ("AIO", "GDS", "EVOFORMER_ATTN", "CUTLASS_OPS"):
        assert f"DS_BUILD_{op}=1" not in build_text
    assert "--no-build-isolation" in build_text
    final_text = " ".join(args for _, args in final)
    # Script jobs bring their trainers: the image has them (pinned like the rest).
    assert "trainplane[runtime,trl,lightning]" in final_text
    assert "--constraint /tmp/base-image.txt" in final_text
    assert "import ray, trainplane.runtime.driver" in final_text
    users = [args for keyword, args in final if keyword == "USER"]
    assert users[-1].split(":")[0] == "1000", "Ray's images (and KubeRay's examples) use uid 1000"


def test_images_agree_on_versions():
    pinned = pins()
    ray = arg_default(CONTROL_PLANE, "RAY_VERSION")
    assert ray == arg_default(WORKER, "RAY_VERSION") == pinned["ray"]
    assert arg_default(WORKER, "DEEPSPEED_VERSION") == pinned["deepspeed"]


def test_constraints_pin_every_declared_dependency():
    pinned = pins()
    for name in pinned:
        # The PyTorch base image owns these; a pin would make pip replace them
        # (nvidia-ml-py, NVML's Python binding, is trainplane's own).
        assert not re.match(r"^(torch|triton|nvidia-(?!ml-py$).*|cuda-.*)$", name), name
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    worker = ("runtime", "trl", "lightning")
    declared = [*project["dependencies"], *(r for name in worker for r in extras[name])]
    for line in declared:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        if name == "torch":
            continue
        assert name in pinned, (
            f"{name} is a dependency but docker/constraints.txt does not pin it: "
            "run .venv/bin/python docker/pin-constraints.py"
        )
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"docker/constraints.txt pins {name}=={pinned[name]}, outside {requirement}"
        )


def test_mlflow_image():
    (final,) = stages(MLFLOW)
    pinned = pins()
    # The MLflow the control plane's client is tested against.
    assert final[0][1] == f"ghcr.io/mlflow/mlflow:v{pinned['mlflow']}"
    installs = [a for k, a in final if k == "RUN" and "pip install" in a]
    (install,) = installs
    command = install.split("&&")[0].split()
    assert command[:3] == ["pip", "install", "--no-cache-dir"]
    packages = {}
    for argument in command[3:]:
        match = EXACT_PIN.match(argument)
        assert match, f"not an exact pin: {argument}"
        packages[canonicalize_name(match[1])] = match[2]
    assert packages.keys() == {"mlflow", "psycopg2-binary", "boto3"}
    assert packages["mlflow"] == pinned["mlflow"], "pip must keep the base image's MLflow"
    assert packages["boto3"] == pinned["boto3"], "the boto3 the control plane ships"
    keywords = dict(final)
    assert "/health" in keywords["HEALTHCHECK"]
    assert '"--port", "5000"' in keywords["CMD"] and "5000/health" in keywords["HEALTHCHECK"]
