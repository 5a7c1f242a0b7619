"""``trainplane up`` on a machine with NVIDIA GPUs registers them: how they
are found (NVML), named, counted and registered. This machine has none, so
detection is tested for its fallback, and registration with a named fake of
an 8-GPU node."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.factories import small_spec
from trainplane.backends.local_gpus import (
    DetectedGpu,
    accelerator_type,
    detect_gpus,
    local_cluster_fields,
    visible_gpus,
)
from trainplane.backends.local_ray import node_options
from trainplane.services.clusters import upsert_cluster

H100_80GB = 85_520_809_984  # 81559 MiB, as NVML reports an H100 80GB HBM3
# A stand-in for what NVML reports on an 8 x H100 machine: no GPU exists here.
FAKE_H100_NODE = [
    DetectedGpu(index=i, uuid=f"GPU-fake-{i}", name="NVIDIA H100 80GB HBM3", memory_bytes=H100_80GB)
    for i in range(8)
]


def test_without_a_driver_the_machine_has_no_gpus():
    # The binding is installed here, the driver is not: NVML fails to start.
    pytest.importorskip("pynvml")
    assert detect_gpus({}) == []


def test_without_the_nvml_binding_the_machine_has_no_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert detect_gpus({}) == []


@pytest.mark.parametrize(
    ("nvml_name", "accelerator"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A10G", "A10G"),
        ("Tesla T4", "T4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        ("NVIDIA RTX A6000", "A6000"),
    ],
)
def test_the_accelerator_type_is_the_short_name_jobs_ask_for(nvml_name, accelerator):
    assert accelerator_type(nvml_name) == accelerator


def test_cuda_visible_devices_narrows_the_gpus_as_it_does_for_ray():
    assert visible_gpus(FAKE_H100_NODE, {}) == FAKE_H100_NODE
    narrowed = visible_gpus(FAKE_H100_NODE, {"CUDA_VISIBLE_DEVICES": "1,GPU-fake-3"})
    assert [g.index for g in narrowed] == [1, 3]
    assert visible_gpus(FAKE_H100_NODE, {"CUDA_VISIBLE_DEVICES": ""}) == []


def test_a_gpu_machine_is_registered_with_its_gpus_type_and_memory(api, session):
    fields = local_cluster_fields("local", "http://127.0.0.1:8265", slots=32, gpus=FAKE_H100_NODE)
    upsert_cluster(session, **fields)
    (cluster,) = api.get("/v1/clusters").json()["items"]
    assert (cluster["accelerator"], cluster["gpus"], cluster["gpus_per_node"]) == ("H100", 8, 8)
    assert cluster["gpu_memory_gb"] == 85.5  # decimal GB, rounded down
    # A job asking for H100s is one this cluster can hold.
    job = small_spec(resources={"gpus": 8, "gpu_type": "H100"})
    assert api.post("/v1/jobs/plan", json=job).status_code == 200


def test_without_gpus_or_with_cpu_only_the_local_cluster_is_cpu_slots():
    fields = local_cluster_fields("local", "http://127.0.0.1:8265", slots=6, gpus=[])
    assert (fields["accelerator"], fields["gpus"], fields["gpu_memory_gb"]) == ("cpu", 6, None)


def test_the_local_ray_node_offers_the_gpus_it_registers(tmp_path: Path):
    assert "--num-gpus=8" in node_options(4, tmp_path, gpus=len(FAKE_H100_NODE))
    assert "--num-gpus=0" in node_options(4, tmp_path)
