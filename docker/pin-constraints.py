"""Write docker/constraints.txt: exact pins for everything the two images
install from PyPI, taken from the environment this runs in (the checkout's
.venv, which the test suite ran against), so the images ship the versions CI
tested rather than whatever PyPI serves on the day of the build.

    .venv/bin/python docker/pin-constraints.py

It follows the requirements of trainplane (as pyproject.toml declares them,
with the server extra the control plane image installs, the runtime extra
and the trainer extras the worker image ships: trl and lightning),
ray[default,train], DeepSpeed and the build tools, and stops at torch: the
worker image's torch and its CUDA libraries come from the PyTorch base image,
and pinning them here would make pip replace them.
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docker" / "constraints.txt"

# The extras the images install: the control plane's server extra; the
# worker's runtime, and the trainers that script jobs bring (Transformers/TRL,
# Lightning, Accelerate).
IMAGE_EXTRAS = ("server", "runtime", "trl", "lightning")
# What the Dockerfiles install besides trainplane's own requirements.
EXTRA_ROOTS = ("ray[default,train]", "deepspeed", "setuptools", "wheel", "ninja", "py-cpuinfo")
# Owned by the PyTorch base image (torch, its compiler and CUDA wheels).
# nvidia-ml-py is not one of them: it is trainplane's (NVML, pure Python).
BASE_IMAGE_OWNED = re.compile(r"^(torch|triton|nvidia-(?!ml-py$).*|cuda-.*)$")


def roots() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    declared = [*project["dependencies"], *(r for name in IMAGE_EXTRAS for r in extras[name])]
    return [Requirement(r) for r in (*declared, *EXTRA_ROOTS)]


def closure(start: list[Requirement]) -> dict[str, str]:
    pins: dict[str, str] = {}
    todo = [(req, frozenset(req.extras)) for req in start]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req, extras = todo.pop()
        name = canonicalize_name(req.name)
        if BASE_IMAGE_OWNED.match(name) or (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            sys.exit(f"{name} is required but not installed here: run ./scripts/setup first")
        pins[name] = dist.version
        # A requirement counts when its marker holds for this platform, either
        # unconditionally or for one of the extras asked of its parent.
        environments = [{"extra": ""}, *({"extra": e} for e in sorted(extras))]
        for line in dist.requires or []:
            child = Requirement(line)
            if child.marker is None or any(child.marker.evaluate(e) for e in environments):
                todo.append((child, frozenset(child.extras)))
    return pins


def main() -> None:
    pins = closure(roots())
    local = sorted(f"{n}=={v}" for n, v in pins.items() if "+" in v)
    if local:
        sys.exit(f"local builds cannot be pinned for an image: {', '.join(local)}")
    header = (
        "# Exact versions for docker/*.Dockerfile, written by docker/pin-constraints.py\n"
        "# from the environment the test suite ran in. Regenerate after changing\n"
        "# dependencies: .venv/bin/python docker/pin-constraints.py\n"
    )
    body = "".join(f"{name}=={pins[name]}\n" for name in sorted(pins))
    OUTPUT.write_text(header + body)
    print(f"{OUTPUT.relative_to(ROOT)}: {len(pins)} pins")


if __name__ == "__main__":
    main()
