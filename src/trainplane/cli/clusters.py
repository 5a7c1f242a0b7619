"""``clusters add|apply|list|remove`` and ``projects list|create|update``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from trainplane.cli.cluster_file import clusters_apply
from trainplane.cli.common import EXIT_USAGE, State, call, fail, say
from trainplane.cli.output import JsonFlag, OutputChoice, OutputOption, emit, print_rows
from trainplane.runtime.start_timeout import AUTOSCALING_START_TIMEOUT, FIXED_START_TIMEOUT

clusters_app = typer.Typer(no_args_is_help=True, help="Ray clusters jobs run on.")
projects_app = typer.Typer(no_args_is_help=True, help="Projects jobs belong to.")
clusters_app.command("apply")(clusters_apply)


@clusters_app.command("add")
def clusters_add(
    name: str,
    address: Annotated[str, typer.Option(help="Ray dashboard address, http://host:8265.")],
    gpus: Annotated[int, typer.Option(help="Total accelerators (cpu: worker slots).")],
    accelerator: Annotated[str, typer.Option(help="cpu, H100, H200, A10, ...")] = "cpu",
    gpus_per_node: Annotated[int | None, typer.Option(help="Default: all on one node.")] = None,
    gpu_memory_gb: Annotated[float | None, typer.Option(help="Memory of one GPU.")] = None,
    price_per_gpu_hour: Annotated[float, typer.Option(help="For cost accounting.")] = 0.0,
    label: Annotated[list[str] | None, typer.Option(help="key=value (repeatable).")] = None,
    autoscaling: Annotated[
        bool,
        typer.Option(
            help=f"It adds nodes on demand: attempts wait {AUTOSCALING_START_TIMEOUT:.0f} s "
            "to be placed."
        ),
    ] = False,
    start_timeout: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Seconds an attempt waits for its workers to be placed "
            f"(default: {AUTOSCALING_START_TIMEOUT:.0f} if --autoscaling, "
            f"else {FIXED_START_TIMEOUT:.0f}).",
        ),
    ] = None,
    output: OutputOption = None,
) -> None:
    """Register a Ray cluster; prints its id."""
    labels = {}
    for item in label or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise fail(f"--label {item!r}: expected key=value", EXIT_USAGE)
        labels[key] = value
    body = {
        "name": name,
        "address": address,
        "accelerator": accelerator,
        "gpus": gpus,
        "gpus_per_node": gpus_per_node,
        "gpu_memory_gb": gpu_memory_gb,
        "price_per_gpu_hour": price_per_gpu_hour,
        "labels": labels,
        "autoscaling": autoscaling,
        "start_timeout_seconds": start_timeout,
    }
    cluster = call(State.client().post, "/v1/clusters", body)
    emit(cluster, OutputChoice.of(output), lambda c: typer.echo(c["id"]))


@clusters_app.command("list")
def clusters_list(output: OutputOption = None, as_json: JsonFlag = False) -> None:
    """List clusters with their capacity and use."""
    items = call(State.client().get, "/v1/clusters")["items"]
    emit(items, OutputChoice.of(output, as_json), _print_clusters)


def _print_clusters(items: list[dict[str, Any]]) -> None:
    if not items:
        say(
            "no clusters registered: jobs wait until one is "
            "(trainplane clusters add NAME --address http://HOST:8265 --gpus N)"
        )
        return
    print_rows(
        [
            [
                c["name"],
                c["status"],
                c["accelerator"],
                f"{c['gpus_in_use']}/{c['gpus']}",
                c["address"],
            ]
            for c in items
        ],
        ["NAME", "STATUS", "ACCELERATOR", "GPUS IN USE", "ADDRESS"],
    )


@clusters_app.command("remove")
def clusters_remove(name: str) -> None:
    """Unregister a cluster (refused while attempts run on it)."""
    call(State.client().json, "DELETE", f"/v1/clusters/{name}")
    typer.echo(f"cluster {name} removed")


@projects_app.command("list")
def projects_list(output: OutputOption = None, as_json: JsonFlag = False) -> None:
    """List the projects you can see."""
    items = call(State.client().get, "/v1/projects")["items"]
    emit(items, OutputChoice.of(output, as_json), _print_projects)


def _print_projects(items: list[dict[str, Any]]) -> None:
    if not items:
        say("no projects you can see (trainplane projects create NAME makes one)")
        return
    for project in items:  # tab-separated, for cut and awk
        typer.echo(f"{project['name']}\t{project['description']}\t{project['storage_root']}")


@projects_app.command("create")
def projects_create(
    name: str,
    description: Annotated[str, typer.Option(help="What the project is for.")] = "",
    output: OutputOption = None,
) -> None:
    """Create a project; prints its id."""
    project = call(State.client().post, "/v1/projects", {"name": name, "description": description})
    emit(project, OutputChoice.of(output), lambda p: typer.echo(p["id"]))


@projects_app.command("update")
def projects_update(
    name: str,
    max_gpus: Annotated[int | None, typer.Option(help="GPUs in use at once.")] = None,
    gpu_hours_per_month: Annotated[
        float | None, typer.Option(help="GPU-hours per calendar month (UTC).")
    ] = None,
    no_gpu_limit: Annotated[
        bool, typer.Option("--no-gpu-limit", help="Remove the GPU limit.")
    ] = False,
    no_budget: Annotated[
        bool, typer.Option("--no-budget", help="Remove the monthly budget.")
    ] = False,
    weight: Annotated[
        float | None, typer.Option(help="Fair-share weight (default 1).", min=0.001)
    ] = None,
    description: Annotated[str | None, typer.Option(help="What the project is for.")] = None,
    storage: Annotated[
        str | None,
        typer.Option(
            help="Storage root (absolute path or s3://bucket/prefix) the project's job "
            "folders and resumed checkpoints must lie under; jobs already submitted keep "
            "their folders."
        ),
    ] = None,
    default_storage: Annotated[
        bool,
        typer.Option(
            "--default-storage", help="Back to the default root, <server storage>/<project>."
        ),
    ] = False,
    output: OutputOption = None,
) -> None:
    """Set a project's quotas, fair-share weight and storage root (installation admins)."""
    body: dict[str, object] = {}
    if storage is not None or default_storage:
        if storage is not None and default_storage:
            raise fail("give --storage or --default-storage, not both", EXIT_USAGE)
        body["storage"] = storage
    if weight is not None:
        body["weight"] = weight
    if description is not None:
        body["description"] = description
    if max_gpus is not None or no_gpu_limit:
        body["max_gpus"] = None if no_gpu_limit else max_gpus
    if gpu_hours_per_month is not None or no_budget:
        body["gpu_hours_per_month"] = None if no_budget else gpu_hours_per_month
    if not body:
        raise fail("nothing to change: give --max-gpus, --gpu-hours-per-month, ...", EXIT_USAGE)
    project = call(State.client().json, "PATCH", f"/v1/projects/{name}", json=body)
    emit(project, OutputChoice.of(output), lambda p: _print_update(p, "storage" in body))


def _print_update(project: dict[str, Any], storage: bool) -> None:
    limit = project["max_gpus"] or "no limit"
    budget = project["gpu_hours_per_month"] or "no limit"
    typer.echo(
        f"{project['name']}: max GPUs {limit}, GPU-hours per month {budget}, "
        f"weight {project['weight']:g}"
    )
    if storage:
        typer.echo(f"{project['name']}: storage root {project['storage_root']}")
