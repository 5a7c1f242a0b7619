"""An unset precision: bf16 on GPUs, fp32 on CPU workers; a named one as named.
The memory estimate resolves it the way the runtime does."""

from __future__ import annotations

import pytest

from tests.factories import train_spec
from trainplane.jobs.precision import allows_tf32, resolved_precision
from trainplane.jobs.spec import parse_spec
from trainplane.services.estimates import workload_of


@pytest.mark.parametrize(
    ("requested", "bf16_gpu", "expected"),
    [
        (None, True, "bf16"),
        (None, False, "fp32"),
        ("fp32", True, "fp32"),  # fp32 stays available on GPUs
        ("bf16", False, "bf16"),
        ("fp16", True, "fp16"),
    ],
)
def test_an_unset_precision_is_bf16_on_gpus_and_fp32_elsewhere(
    requested: str | None, bf16_gpu: bool, expected: str
) -> None:
    assert resolved_precision(requested, bf16_gpu=bf16_gpu) == expected


def test_an_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="fp8"):
        resolved_precision("fp8", bf16_gpu=True)


def test_tf32_unless_fp32_is_asked_for_by_name() -> None:
    assert allows_tf32(None) and allows_tf32("bf16") and not allows_tf32("fp32")


def test_a_spec_without_precision_is_estimated_in_bf16_on_gpus_only() -> None:
    document = train_spec()
    document.pop("precision", None)
    spec = parse_spec(document)
    assert spec.precision is None  # unset, stored as unset
    assert workload_of(spec, on_gpu=True).precision == "bf16"
    assert workload_of(spec, on_gpu=False).precision == "fp32"
    named = parse_spec(train_spec(precision="fp32"))
    assert workload_of(named, on_gpu=True).precision == "fp32"
