# syntax=docker/dockerfile:1.7
# trainplane worker: the image of every Ray node, head and GPU workers alike.
# Each attempt runs `python -m trainplane.runtime.driver` there, so it carries
# trainplane with its runtime extra, Ray, and DeepSpeed with its CUDA ops
# compiled in. torch and CUDA come from the PyTorch base image and are never
# reinstalled. Build from the checkout:
#   docker build -f docker/worker.Dockerfile -t trainplane/worker:0.1.0 .
#
# Keep the two base tags below on the same PyTorch and CUDA release: the ops
# are compiled against the devel image's torch and run against the runtime's.
#
# GPU nodes need an NVIDIA driver of branch 580 or newer: the image is CUDA
# 13.0, and an older driver cannot run it (torch then sees no GPU at all).
# NVIDIA_REQUIRE_CUDA below makes the NVIDIA container runtime refuse such a
# node with a message saying so, instead of starting a worker without GPUs.
# docs/production.md (GPU nodes) lists the rest: NCCL's network devices,
# /dev/shm, and benchmarks/gpu_suite.py to check a new node pool.

FROM pytorch/pytorch:2.13.0-cuda13.0-cudnn9-devel AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
ARG DEEPSPEED_VERSION=0.19.8
# Compute capabilities compiled for: 8.0 is A100, 9.0 is H100 and H200.
ARG TORCH_CUDA_ARCH_LIST="8.0;9.0"
# Parallel compiler jobs; each takes a few GB of memory.
ARG MAX_JOBS=8
COPY docker/constraints.txt /tmp/constraints.txt
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY src ./src
COPY migrations ./migrations
# base-image.txt pins what the base image brings (torch, torchvision,
# torchaudio and their CUDA wheels) at the versions it has, so no install
# below can replace them. nvidia-ml-py is trainplane's own (NVML for the GPU
# figures), pinned by constraints.txt, whatever the base image has.
#
# DeepSpeed's ops, prebuilt: the fused and CPU optimizers (CPU Adam is what
# optimizer offload runs), the flatten utilities ZeRO uses, and the quantizer
# ZeRO++ uses. These need nothing beyond the CUDA toolkit; the rest need extra
# libraries (async_io: libaio, gds: cuFile, evoformer/cutlass: CUTLASS) or only
# serve inference, so they are left out (NVMe offload needs async_io, so it is
# not available in this image). DeepSpeed compiles its CPU ops with
# -march=native: build on a machine whose CPUs are no newer than the GPU
# nodes', or CPU Adam may stop with an illegal instruction.
RUN pip list --format=freeze | grep -E '^(torch[a-z]*|triton|nvidia-[^=]+|cuda-[^=]+)==' | { grep -v '^nvidia-ml-py==' || true; } > /tmp/base-image.txt \
    && grep -E '^(ninja|packaging|psutil|py-cpuinfo|setuptools|wheel)==' /tmp/constraints.txt > /tmp/build-tools.txt \
    && pip install --no-cache-dir --constraint /tmp/base-image.txt --requirement /tmp/build-tools.txt \
    && PIP_CONSTRAINT=/tmp/constraints.txt pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && DS_BUILD_OPS=0 \
       DS_BUILD_CPU_ADAM=1 DS_BUILD_CPU_ADAGRAD=1 DS_BUILD_CPU_LION=1 \
       DS_BUILD_FUSED_ADAM=1 DS_BUILD_FUSED_LAMB=1 DS_BUILD_FUSED_LION=1 \
       DS_BUILD_UTILS=1 DS_BUILD_QUANTIZER=1 \
       TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST}" MAX_JOBS="${MAX_JOBS}" \
       pip wheel --no-cache-dir --no-build-isolation --no-deps --wheel-dir /wheels \
       "deepspeed==${DEEPSPEED_VERSION}"

FROM pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
ARG RAY_VERSION=2.60.0
COPY docker/constraints.txt /tmp/constraints.txt
# The same pins as the build stage; after the install, the base image's torch
# and CUDA wheels must be exactly as they were, and the driver must import.
# trainplane is installed by file, never by name, so that a package of the same
# name on PyPI cannot win.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip list --format=freeze | grep -E '^(torch[a-z]*|triton|nvidia-[^=]+|cuda-[^=]+)==' | { grep -v '^nvidia-ml-py==' || true; } > /tmp/base-image.txt \
    && set -- /wheels/trainplane-*.whl \
    && pip install --no-cache-dir --constraint /tmp/constraints.txt --constraint /tmp/base-image.txt \
       "trainplane[runtime,trl,lightning] @ file://$1" \
       "ray[default,train]==${RAY_VERSION}" /wheels/deepspeed-*.whl \
    && pip list --format=freeze | grep -E '^(torch[a-z]*|triton|nvidia-[^=]+|cuda-[^=]+)==' \
       | { grep -v '^nvidia-ml-py==' || true; } | diff /tmp/base-image.txt - \
    && python -c "import ray, trainplane.runtime.driver"
# Ray's images run as uid 1000 (group 100, users), and KubeRay's examples and
# fsGroup settings assume it. Some Ubuntu bases already have a uid 1000 user.
RUN if getent passwd 1000 >/dev/null; then userdel --remove "$(getent passwd 1000 | cut -d: -f1)"; fi \
    && useradd --uid 1000 --gid 100 --create-home --home-dir /home/ray --shell /bin/bash ray \
    && install -d -o 1000 -g 100 /data/checkpoints
# Without RAY_USAGE_STATS_ENABLED=0 every cluster reports usage to Ray's
# maintainers.
ENV HOME=/home/ray \
    PYTHONUNBUFFERED=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    NVIDIA_REQUIRE_CUDA="cuda>=13.0"
USER 1000:100
WORKDIR /home/ray
# GCS, dashboard (the Jobs API trainplane uses), Ray client.
EXPOSE 6379 8265 10001
