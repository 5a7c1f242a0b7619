"""A JSON schema for KubeRay's ``RayCluster`` (``ray.io/v1``), written here from
KubeRay's published API reference, because no package registry this project
can reach (PyPI, npm, Debian) carries the CRD's own OpenAPI schema.

Its weakness: it is a transcription, not the CRD. It knows the fields of
RayClusterSpec, HeadGroupSpec, WorkerGroupSpec and AutoscalerOptions as of
KubeRay 1.x and rejects any other (so a typo or a field from another version
fails), and it types them, but it can lag a new KubeRay release and does not
carry the CRD's own validation rules (the operator's webhook checks more).
Every Kubernetes type inside (pod templates, resources, env, Service) is
checked against Kubernetes' own strict schema from ``kubernetes-validate``.
"""

from __future__ import annotations

from typing import Any

K8S = "https://kubernetes.io/api/_definitions.json#/$defs/"


def k8s(name: str) -> dict[str, Any]:
    return {"$ref": K8S + name}


STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
NON_NEGATIVE = {"type": "integer", "minimum": 0}


def closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


AUTOSCALER_OPTIONS = closed(
    {
        "resources": k8s("io.k8s.api.core.v1.ResourceRequirements"),
        "image": {"type": "string"},
        "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
        "securityContext": k8s("io.k8s.api.core.v1.SecurityContext"),
        "idleTimeoutSeconds": NON_NEGATIVE,
        "upscalingMode": {"enum": ["Default", "Aggressive", "Conservative"]},
        "version": {"enum": ["v1", "v2"]},
        "env": {"type": "array", "items": k8s("io.k8s.api.core.v1.EnvVar")},
        "envFrom": {"type": "array", "items": k8s("io.k8s.api.core.v1.EnvFromSource")},
        "volumeMounts": {"type": "array", "items": k8s("io.k8s.api.core.v1.VolumeMount")},
    }
)

HEAD_GROUP = closed(
    {
        "template": k8s("io.k8s.api.core.v1.PodTemplateSpec"),
        "headService": k8s("io.k8s.api.core.v1.Service"),
        "enableIngress": {"type": "boolean"},
        # Every value becomes `--key=value` of `ray start`: strings only.
        "rayStartParams": STRING_MAP,
        "serviceType": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
        "resources": STRING_MAP,
        "labels": STRING_MAP,
    },
    required=("template",),
)

WORKER_GROUP = closed(
    {
        "groupName": {"type": "string", "minLength": 1},
        "replicas": NON_NEGATIVE,
        "minReplicas": NON_NEGATIVE,
        "maxReplicas": NON_NEGATIVE,
        "idleTimeoutSeconds": NON_NEGATIVE,
        "numOfHosts": {"type": "integer", "minimum": 1},
        "suspend": {"type": "boolean"},
        "rayStartParams": STRING_MAP,
        "template": k8s("io.k8s.api.core.v1.PodTemplateSpec"),
        "scaleStrategy": closed(
            {"workersToDelete": {"type": "array", "items": {"type": "string"}}}
        ),
        "resources": STRING_MAP,
        "labels": STRING_MAP,
    },
    required=("groupName", "template"),
)

REDIS_CREDENTIAL = closed(
    {"value": {"type": "string"}, "valueFrom": k8s("io.k8s.api.core.v1.EnvVarSource")}
)

RAY_CLUSTER_SPEC = closed(
    {
        "rayVersion": {"type": "string"},
        "enableInTreeAutoscaling": {"type": "boolean"},
        "autoscalerOptions": AUTOSCALER_OPTIONS,
        "headServiceAnnotations": STRING_MAP,
        "headGroupSpec": HEAD_GROUP,
        "workerGroupSpecs": {"type": "array", "items": WORKER_GROUP},
        "suspend": {"type": "boolean"},
        "managedBy": {"enum": ["ray.io/kuberay-operator", "kueue.x-k8s.io/multikueue"]},
        "gcsFaultToleranceOptions": closed(
            {
                "redisUsername": REDIS_CREDENTIAL,
                "redisPassword": REDIS_CREDENTIAL,
                "externalStorageNamespace": {"type": "string"},
                "redisAddress": {"type": "string"},
            }
        ),
        "authOptions": closed({"mode": {"enum": ["disabled", "token"]}}),
    },
    required=("headGroupSpec",),
)

RAY_CLUSTER = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "urn:trainplane:test:kuberay:raycluster-v1",
    **closed(
        {
            "apiVersion": {"const": "ray.io/v1"},
            "kind": {"const": "RayCluster"},
            "metadata": k8s("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
            "spec": RAY_CLUSTER_SPEC,
        },
        required=("apiVersion", "kind", "metadata", "spec"),
    ),
}
