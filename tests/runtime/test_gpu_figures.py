"""The GPU figures reported with each step: the max and mean over ranks, and
what happens where NVML cannot be read (this machine: nvidia-ml-py is
installed, the NVIDIA driver's library is not)."""

from __future__ import annotations

import sys

import pytest
import torch

from trainplane.runtime.gpu_figures import GpuFigures, NvmlReader, Sample, over_ranks, summarize

pytestmark = pytest.mark.ray_free


def test_the_figures_are_the_max_and_mean_over_ranks() -> None:
    figures = summarize([Sample(90.0, 60.0), Sample(30.0, 20.0), Sample(60.0, 40.0)])
    assert figures == {
        "gpu_utilization_max": 90.0,
        "gpu_utilization_mean": 60.0,
        "gpu_memory_gb_max": 60.0,
        "gpu_memory_gb_mean": 40.0,
    }


def test_a_rank_without_figures_is_left_out_not_counted_as_zero() -> None:
    figures = summarize([Sample(80.0, 10.0), None, Sample(40.0, 30.0)])
    assert figures["gpu_utilization_mean"] == 60.0
    assert figures["gpu_memory_gb_mean"] == 20.0


def test_no_figures_anywhere_means_no_gpu_metrics() -> None:
    assert summarize([None, None]) == {}
    assert summarize([]) == {}


@pytest.mark.usefixtures("one_rank_group")
def test_the_gathered_figures_of_a_world_of_one_are_its_own() -> None:
    cpu = torch.device("cpu")
    assert over_ranks(Sample(50.0, 2.5), world_size=1, device=cpu) == {
        "gpu_utilization_max": 50.0,
        "gpu_utilization_mean": 50.0,
        "gpu_memory_gb_max": 2.5,
        "gpu_memory_gb_mean": 2.5,
    }
    assert over_ranks(None, world_size=1, device=cpu) == {}


def test_without_the_nvidia_driver_the_figures_are_absent_and_said_once() -> None:
    said: list[str] = []
    reader = NvmlReader(torch.device("cuda", 0), say=said.append)
    assert reader.read() is None
    assert reader.read() is None
    (line,) = said
    assert "no GPU figures from cuda:0" in line and "NVML" in line


def test_without_nvidia_ml_py_the_line_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    said: list[str] = []
    assert NvmlReader(torch.device("cuda", 1), say=said.append).read() is None
    assert said == [
        "trainplane: no GPU figures from cuda:1: nvidia-ml-py is not installed "
        "(pip install nvidia-ml-py)"
    ]


def test_on_cpu_workers_nothing_is_read_or_gathered() -> None:
    figures = GpuFigures(torch.device("cpu"), world_size=4, rank=2)
    assert figures.reader is None
    assert figures.gather() == {}  # no collective: dist is not even initialized here
