"""``clusters apply FILE``: the clusters a deployment declares, registered or
brought up to date, idempotently; what Kubernetes and compose run on every
rollout.

The file is YAML::

    clusters:
      - name: h100
        address: http://trainplane-h100-head-svc:8265
        accelerator: H100
        gpus: 64
        gpus_per_node: 8
        autoscaling: true        # nodes from zero: attempts wait 15 min to be placed

Each entry is one ``PUT /v1/clusters/{name}``, validated by the server; the
file's shape is checked here first, so a typo in the last entry changes
nothing. Clusters missing from the file are left alone (``clusters remove``
takes one away).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from trainplane.cli.common import EXIT_USAGE, State, call, exit_code_for, fail, refusal
from trainplane.sdk.errors import TrainplaneError

FIELDS = (
    "name",
    "address",
    "accelerator",
    "gpus",
    "gpus_per_node",
    "gpu_memory_gb",
    "price_per_gpu_hour",
    "labels",
    "autoscaling",
    "start_timeout_seconds",
)


class ClusterFileError(Exception):
    pass


def read_cluster_file(path: Path) -> list[dict[str, Any]]:
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ClusterFileError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ClusterFileError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("clusters"), list):
        raise ClusterFileError(f"{path}: expected a mapping with a `clusters` list")
    entries = document["clusters"]
    unknown_top = sorted(set(document) - {"clusters"})
    if unknown_top:
        raise ClusterFileError(f"{path}: unknown field {unknown_top[0]!r}")
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"clusters[{index}]"
        if not isinstance(entry, dict):
            raise ClusterFileError(f"{where}: expected a mapping of cluster fields")
        unknown = sorted(set(entry) - set(FIELDS))
        if unknown:
            raise ClusterFileError(f"{where}.{unknown[0]}: unknown field")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ClusterFileError(f"{where}.name: required")
        if name in seen:
            raise ClusterFileError(f"{where}.name: '{name}' appears twice")
        seen.add(name)
    return entries


def clusters_apply(
    path: Annotated[Path, typer.Argument(help="YAML file with a `clusters:` list.")],
) -> None:
    """Register the file's clusters, or update them to match it (safe to repeat)."""
    try:
        entries = read_cluster_file(path)
    except ClusterFileError as exc:
        raise fail(str(exc), EXIT_USAGE) from None
    client = State.client()
    before = {c["name"]: c for c in call(client.get, "/v1/clusters")["items"]}
    for index, entry in enumerate(entries):
        name = entry["name"]
        try:
            answer = client.send("PUT", f"/v1/clusters/{name}", json=entry)
        except TrainplaneError as exc:
            raise fail(f"clusters[{index}] ({name}): {refusal(exc)}", exit_code_for(exc)) from None
        after = answer.json()
        if answer.status_code == 201:
            change = "created"
        elif all(before[name].get(k) == after.get(k) for k in FIELDS):
            change = "unchanged"
        else:
            change = "updated"
        typer.echo(f"{name}\t{change}")
