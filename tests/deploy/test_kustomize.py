"""deploy/kustomize: every overlay renders with `kubectl kustomize`, every
object is valid for Kubernetes (kubernetes-validate, strict) and every
RayCluster for KubeRay (kuberay_schema), and the rendered deployment is the
one docs/production.md describes."""

from __future__ import annotations

import copy
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
import kubernetes_validate
import pytest
from referencing import Registry, Resource

from tests.deploy.conftest import (
    ROOT,
    SECRET_NAME,
    containers,
    pod_specs,
    project_version,
)
from tests.deploy.kuberay_schema import RAY_CLUSTER
from tests.deploy.test_dockerfiles import pins
from trainplane.cli.cluster_file import read_cluster_file

# The oldest Kubernetes the manifests promise to work on.
K8S_VERSION = "1.30"
# The keys of trainplane-secrets the manifests read; docs/production.md's
# `kubectl create secret` must mention each.
SECRET_KEYS = {
    "database-url",
    "bootstrap-token",
    "secret-key",
    "aws-access-key-id",
    "aws-secret-access-key",
}
TRAINPLANE_IMAGES = ("trainplane/control-plane", "trainplane/worker")


def objects(rendered, kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [(o, obj) for o, objs in rendered.items() for obj in objs if obj["kind"] == kind]


def one(objs: list[dict[str, Any]], kind: str, name_prefix: str) -> dict[str, Any]:
    (found,) = [
        o for o in objs if o["kind"] == kind and o["metadata"]["name"].startswith(name_prefix)
    ]
    return found


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


@pytest.fixture(scope="module")
def kuberay() -> jsonschema.Draft202012Validator:
    # kubernetes-validate's strict definitions for K8S_VERSION: the pod
    # templates, resources and env inside a RayCluster are checked by them.
    folder = f"v{K8S_VERSION}.0-local-strict"
    path = resources.files("kubernetes_validate") / "kubernetes-json-schema" / folder
    definitions = Resource.from_contents(json.loads((path / "_definitions.json").read_text()))
    registry = Registry().with_resource("https://kubernetes.io/api/_definitions.json", definitions)
    return jsonschema.Draft202012Validator(RAY_CLUSTER, registry=registry)


def test_every_object_is_valid_kubernetes(rendered):
    problems = []
    for overlay, objs in rendered.items():
        for obj in objs:
            if obj["kind"] == "RayCluster":
                continue  # no Kubernetes schema: see the next test
            where = f"{overlay}: {obj['kind']}/{obj['metadata']['name']}"
            try:
                kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                problems.append(f"{where} {'.'.join(map(str, exc.path))}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError as exc:
                problems.append(f"{where}: {exc.message}")
    assert not problems, "\n".join(problems)


def test_every_raycluster_matches_the_kuberay_schema(rendered, kuberay):
    clusters = objects(rendered, "RayCluster")
    assert clusters, "no overlay deploys a RayCluster"
    problems = [
        f"{overlay}: {obj['metadata']['name']} {error.json_path}: {error.message}"
        for overlay, obj in clusters
        for error in kuberay.iter_errors(obj)
    ]
    assert not problems, "\n".join(problems)


def test_the_kuberay_schema_rejects_what_kuberay_would(rendered, kuberay):
    _, cluster = objects(rendered, "RayCluster")[0]
    cases = {
        "misspelt field": ("spec", "workerGroupSpec", []),
        "rayStartParams must be strings": ("headGroupSpec", "rayStartParams", {"num-gpus": 0}),
        "pod spec typo": ("podSpec", "containerz", []),
    }
    for label, (where, key, value) in cases.items():
        broken = copy.deepcopy(cluster)
        target = {
            "spec": broken["spec"],
            "headGroupSpec": broken["spec"]["headGroupSpec"],
            "podSpec": broken["spec"]["headGroupSpec"]["template"]["spec"],
        }[where]
        target[key] = value
        assert list(kuberay.iter_errors(broken)), f"not caught: {label}"


def test_namespaced_and_secret_free(rendered):
    for overlay, objs in rendered.items():
        for obj in objs:
            assert obj["kind"] != "Secret", f"{overlay}: secrets are created by hand, never shipped"
            assert obj["metadata"].get("namespace") == "trainplane", (
                f"{overlay}: {obj['kind']}/{obj['metadata']['name']} has no namespace"
            )
            for container in containers(obj):
                for source in container.get("envFrom", []):
                    assert source.get("secretRef", {}).get("name", SECRET_NAME) == SECRET_NAME
                for entry in container.get("env", []):
                    ref = entry.get("valueFrom", {}).get("secretKeyRef")
                    if ref:
                        assert ref["name"] == SECRET_NAME and ref["key"] in SECRET_KEYS, ref
                    else:
                        assert not re.search(r"PASSWORD|TOKEN|SECRET", entry["name"]), entry
            if obj["kind"] == "ConfigMap":
                for key in obj.get("data", {}):
                    assert not re.search(r"PASSWORD|TOKEN|SECRET|ACCESS_KEY", key), key
    production_doc = (ROOT / "docs" / "production.md").read_text()
    for key in SECRET_KEYS:
        assert f"--from-literal={key}=" in production_doc, f"docs/production.md omits {key}"


def test_images_are_pinned(rendered):
    for overlay, objs in rendered.items():
        for obj in objs:
            for container in containers(obj):
                image = container["image"]
                name, _, tag = image.rpartition(":")
                assert name and "/" not in tag and tag != "latest", f"{overlay}: {image}"
                assert re.fullmatch(r"\d+(\.\d+)+[\w.-]*", tag), f"{overlay}: {image}"
                if name.endswith(TRAINPLANE_IMAGES):
                    assert tag == project_version(), f"{overlay}: {image}"


def test_the_control_plane(rendered):
    for overlay, objs in rendered.items():
        deployment = one(objs, "Deployment", "trainplane")
        assert deployment["spec"]["replicas"] >= 2, overlay
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["args"] == [
            "trainplane", "server", "--host", "0.0.0.0", "--port", "8080", "--workers", "1"
        ]  # fmt: skip
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert pod["securityContext"]["runAsNonRoot"] is True
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        volumes = {v["name"]: v for v in pod["volumes"]}
        for mount in container["volumeMounts"]:
            assert "emptyDir" in volumes[mount["name"]], f"{overlay}: {mount} is not scratch"
        for part in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][part]), part
        env = env_of(container)
        assert env["TRAINPLANE_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["key"] == "database-url"
        assert (
            env["TRAINPLANE_BOOTSTRAP_TOKEN"]["valueFrom"]["secretKeyRef"]["key"]
            == "bootstrap-token"
        )

        settings_map = one(objs, "ConfigMap", "trainplane-settings")
        settings = settings_map["data"]
        sources = [c["configMapRef"]["name"] for c in container["envFrom"]]
        assert settings_map["metadata"]["name"] in sources, f"{overlay}: settings not read"
        storage = settings["TRAINPLANE_CHECKPOINT_STORAGE"]
        assert urlparse(storage).scheme == "s3", f"{overlay}: checkpoints on {storage}"
        advertised = urlparse(settings["TRAINPLANE_ADVERTISE_URL"])
        assert advertised.hostname.split(".")[0] == "trainplane" and advertised.port == 8080

        service = one(objs, "Service", "trainplane")
        assert [p["port"] for p in service["spec"]["ports"]] == [8080]
        assert service["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
        assert service["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        for selector in (
            service["spec"]["selector"],
            one(objs, "PodDisruptionBudget", "trainplane")["spec"]["selector"]["matchLabels"],
        ):
            assert selector.items() <= pod_labels.items()
    production = one(rendered["production"], "Deployment", "trainplane")
    assert production["spec"]["replicas"] == 3


def test_the_jobs(rendered):
    for objs in rendered.values():
        migrate = one(objs, "Job", "trainplane-db-upgrade")["spec"]["template"]["spec"]
        assert migrate["containers"][0]["args"] == ["trainplane", "db", "upgrade"]
        register = one(objs, "Job", "trainplane-register-clusters")["spec"]["template"]["spec"]
        (container,) = register["containers"]
        script = container["args"][0]
        assert "/readyz" in script
        assert "exec trainplane clusters apply /etc/trainplane/clusters.yaml" in script
        token = env_of(container)["TRAINPLANE_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert token["key"] == "bootstrap-token"
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/etc/trainplane"]
        volume = next(v for v in register["volumes"] if v["name"] == mount["name"])
        mounted = one(objs, "ConfigMap", "trainplane-clusters")
        assert volume["configMap"]["name"] == mounted["metadata"]["name"]
        assert "clusters.yaml" in mounted["data"]
    # The guides wait on and delete these Jobs by name.
    for guide in ("production.md", "upgrade.md"):
        text = (ROOT / "docs" / guide).read_text()
        for job in ("job/trainplane-db-upgrade", "trainplane-register-clusters"):
            assert job in text, f"docs/{guide} does not name {job}"


def test_the_rayclusters(rendered):
    ray_version = pins()["ray"]
    for overlay, cluster in objects(rendered, "RayCluster"):
        where = f"{overlay}: {cluster['metadata']['name']}"
        spec = cluster["spec"]
        assert spec["rayVersion"] == ray_version, f"{where}: the images run Ray {ray_version}"
        assert spec["enableInTreeAutoscaling"] is True
        head = spec["headGroupSpec"]
        assert head["rayStartParams"]["num-gpus"] == "0"
        (head_container,) = head["template"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in head_container["ports"]}
        assert ports["dashboard"] == 8265
        assert "nvidia.com/gpu" not in head_container["resources"].get("limits", {})
        assert spec["workerGroupSpecs"], where
        for group in spec["workerGroupSpecs"]:
            assert 0 <= group["minReplicas"] <= group["maxReplicas"], where
            assert group["minReplicas"] <= group.get("replicas", 0) <= group["maxReplicas"]
            pod = group["template"]["spec"]
            assert pod["nodeSelector"]["nvidia.com/gpu.product"], where
            assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"]), where
            (container,) = pod["containers"]
            assert int(container["resources"]["limits"]["nvidia.com/gpu"]) > 0, where
            shm = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
            (volume,) = [v for v in pod["volumes"] if v["name"] == shm[0]["name"]]
            assert volume["emptyDir"]["medium"] == "Memory", f"{where}: NCCL needs /dev/shm"
        for pod in pod_specs(cluster):
            (container,) = pod["containers"]
            assert container["image"].rpartition(":")[0].endswith("trainplane/worker"), where
            keys = {
                e["valueFrom"]["secretKeyRef"]["key"]
                for e in container.get("env", [])
                if "secretKeyRef" in e.get("valueFrom", {})
            }
            assert {"aws-access-key-id", "aws-secret-access-key"} <= keys, f"{where}: S3 access"
            assert any(
                ref["configMapRef"]["name"].startswith("trainplane-storage")
                for ref in container["envFrom"]
            )


def test_registered_clusters_are_the_deployed_ones(rendered, tmp_path: Path):
    for overlay, objs in rendered.items():
        data = one(objs, "ConfigMap", "trainplane-clusters")["data"]["clusters.yaml"]
        (tmp_path / f"{overlay}.yaml").write_text(data)
        # The parser `trainplane clusters apply` itself uses.
        entries = {
            urlparse(e["address"]).hostname.split(".")[0]: e
            for e in read_cluster_file(tmp_path / f"{overlay}.yaml")
        }
        deployed = [o for o in objs if o["kind"] == "RayCluster"]
        assert len(entries) == len(deployed), f"{overlay}: one registration per RayCluster"
        for cluster in deployed:
            name = cluster["metadata"]["name"]
            entry = entries.get(f"{name}-head-svc")
            assert entry, f"{overlay}: {name} is not registered (KubeRay's {name}-head-svc)"
            address = urlparse(entry["address"])
            assert address.port == 8265, f"{overlay}: {entry['address']} is not the dashboard"
            host = address.hostname.split(".")
            if len(host) > 1:
                assert host[1] == cluster["metadata"]["namespace"], entry["address"]
            (group,) = cluster["spec"]["workerGroupSpecs"]
            (container,) = group["template"]["spec"]["containers"]
            per_node = int(container["resources"]["limits"]["nvidia.com/gpu"])
            nodes = group["maxReplicas"] * group.get("numOfHosts", 1)
            assert entry["gpus_per_node"] == per_node, f"{overlay}: {name}"
            assert entry["gpus"] == nodes * per_node, f"{overlay}: {name} can reach {nodes} nodes"
            product = group["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"]
            assert entry["accelerator"].upper() in product.upper(), f"{overlay}: {product}"


@pytest.mark.parametrize("overlay", ["production", "single-gpu-type"])
def test_expected_overlays_exist(rendered, overlay):
    assert overlay in rendered
