"""What a worker trains in: the spec's precision resolved for its device, and
TF32 for a GPU's fp32 matmuls unless fp32 is asked for by name."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from trainplane.jobs.spec import parse_spec
from trainplane.runtime.context import TrainContext
from trainplane.runtime.driver import precision_described
from trainplane.runtime.precision import set_matmul_precision

pytestmark = pytest.mark.ray_free


@pytest.fixture
def matmul_precision() -> Iterator[None]:
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


@pytest.mark.usefixtures("matmul_precision")
@pytest.mark.parametrize(
    ("requested", "expected"), [(None, "high"), ("bf16", "high"), ("fp32", "highest")]
)
def test_a_gpu_worker_uses_tf32_unless_fp32_is_named(requested: str | None, expected: str) -> None:
    torch.set_float32_matmul_precision("medium")
    # Only the device's type is read: no GPU is needed to say it is one.
    set_matmul_precision(requested, torch.device("cuda", 0))
    assert torch.get_float32_matmul_precision() == expected
    assert torch.backends.cuda.matmul.allow_tf32 is (expected == "high")  # readable after


@pytest.mark.usefixtures("matmul_precision")
def test_a_cpu_worker_keeps_its_matmul_precision() -> None:
    torch.set_float32_matmul_precision("highest")
    set_matmul_precision(None, torch.device("cpu"))
    assert torch.get_float32_matmul_precision() == "highest"


@pytest.mark.parametrize(("requested", "expected"), [(None, "fp32"), ("bf16", "bf16")])
def test_a_cpu_worker_trains_in_fp32_unless_told(requested: str | None, expected: str) -> None:
    spec = parse_spec(
        {"kind": "train", "name": "p", "entrypoint": {"function": "x:y"}, "precision": requested}
    )
    context = TrainContext(spec, rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))
    assert context.precision == expected


def test_the_attempts_log_tells_the_precision_the_ranks_will_use() -> None:
    assert precision_described("fp16", on_gpu=True) == "fp16"
    assert precision_described(None, on_gpu=False) == "fp32"
    # The driver may run on a node with no GPU: it states the rule, not a guess.
    assert precision_described(None, on_gpu=True).startswith("unset: bf16")
