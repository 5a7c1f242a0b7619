"""What multi-node NCCL needs from the GPU workers: the InfiniBand and EFA
overlays give every worker its RDMA devices, the right to pin memory and
NCCL's settings; every worker has a memory-backed /dev/shm; the worker image
says which NVIDIA driver it needs, and the production guide repeats it."""

from __future__ import annotations

import re
from typing import Any

from tests.deploy.conftest import ROOT
from tests.deploy.test_dockerfiles import WORKER, stages

NETWORKS = {
    # overlay: (device resource, environment NCCL or libfabric needs)
    "infiniband": ("rdma/rdma_shared_device_a", {"NCCL_IB_HCA": "mlx5"}),
    "efa": ("vpc.amazonaws.com/efa", {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}),
}


def workers(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        group["template"]["spec"]
        for obj in objs
        if obj["kind"] == "RayCluster"
        for group in obj["spec"]["workerGroupSpecs"]
    ]


def test_each_network_overlay_gives_every_gpu_worker_its_devices(rendered):
    for overlay, (device, env) in NETWORKS.items():
        pods = workers(rendered[overlay])
        assert pods, overlay
        for pod in pods:
            (container,) = pod["containers"]
            resources = container["resources"]
            assert int(resources["limits"][device]) >= 1, overlay
            assert resources["requests"][device] == resources["limits"][device], overlay
            assert "IPC_LOCK" in container["securityContext"]["capabilities"]["add"], overlay
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            values = {e["name"]: e.get("value") for e in container["env"]}
            assert env.items() <= values.items(), overlay


def test_the_plain_overlays_ask_for_no_network_devices(rendered):
    devices = {device for device, _ in NETWORKS.values()}
    for overlay in ("production", "single-gpu-type"):
        for pod in workers(rendered[overlay]):
            (container,) = pod["containers"]
            assert not devices & set(container["resources"]["limits"]), overlay


def test_every_gpu_worker_has_a_memory_backed_dev_shm(rendered):
    for overlay, objs in rendered.items():
        for pod in workers(objs):
            (container,) = pod["containers"]
            (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
            (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
            assert volume["emptyDir"]["medium"] == "Memory", overlay
            assert volume["emptyDir"]["sizeLimit"], f"{overlay}: /dev/shm counts against memory"


def test_the_worker_image_states_the_driver_its_cuda_needs():
    final = stages(WORKER)[-1]
    base = final[0][1].split()[0]
    cuda = re.search(r"-cuda(\d+)\.(\d+)-", base)
    assert cuda, base
    env = " ".join(args for keyword, args in final if keyword == "ENV")
    assert f'NVIDIA_REQUIRE_CUDA="cuda>={cuda[1]}.{cuda[2]}"' in env
    # CUDA 13 needs the 580 driver branch; CUDA 12 runs on 525 and newer.
    driver = "580" if int(cuda[1]) >= 13 else "525"
    guide = (ROOT / "docs" / "production.md").read_text()
    assert f"CUDA {cuda[1]}.{cuda[2]}" in guide and driver in guide
    assert "gpu_suite.py" in guide
