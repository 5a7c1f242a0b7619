"""A train function's return value is read where the job was submitted from,
often a laptop without a GPU: every tensor in it must reach the control plane
as a detached CPU tensor, wherever in the value it is.

This machine has no GPU, so a tensor on one is played by ``FakeCudaTensor``:
it says it is on ``cuda:0`` and, like a real CUDA tensor, pickles into
something that cannot be unpickled on a machine without CUDA. Its copies
(``detach()``, ``cpu()``) are ordinary CPU tensors."""

from __future__ import annotations

import pickle
from collections import namedtuple
from dataclasses import dataclass
from typing import Any, NoReturn

import pytest
import torch

from trainplane.runtime.results import host_pickle

pytestmark = pytest.mark.ray_free


def _unpickle_a_cuda_tensor_without_cuda() -> NoReturn:
    # What torch says when a CUDA tensor is unpickled where there is no GPU.
    raise RuntimeError(
        "Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False."
    )


class FakeCudaTensor(torch.Tensor):
    """A stand-in for a tensor on a GPU (none here); see the module docstring."""

    # Operations on it return plain tensors: a copy of it is an ordinary one.
    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", 0)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (_unpickle_a_cuda_tensor_without_cuda, ())


def on_gpu(values: list[float], *, requires_grad: bool = False) -> torch.Tensor:
    return torch.tensor(values, requires_grad=requires_grad).as_subclass(FakeCudaTensor)


@dataclass
class Summary:
    loss: torch.Tensor
    notes: str


Point = namedtuple("Point", ["step", "value"])


def test_the_stand_in_fails_as_a_cuda_tensor_would() -> None:
    with pytest.raises(RuntimeError, match="CUDA device"):
        pickle.loads(pickle.dumps({"loss": on_gpu([1.0])}))


def test_every_tensor_in_a_nested_value_unpickles_as_a_detached_cpu_tensor() -> None:
    shared = on_gpu([7.0, 8.0])
    value = {
        "losses": [on_gpu([0.5]), (on_gpu([0.25], requires_grad=True) * 2, "x")],
        "summary": Summary(loss=on_gpu([1.5], requires_grad=True), notes="ok"),
        "points": [Point(1, on_gpu([2.0])), Point(2, shared)],
        "again": shared,
        "plain": 3,
    }
    back = pickle.loads(host_pickle(value))
    tensors = [
        back["losses"][0],
        back["losses"][1][0],
        back["summary"].loss,
        back["points"][0].value,
        back["points"][1].value,
    ]
    for tensor in tensors:
        assert type(tensor) is torch.Tensor
        assert tensor.device.type == "cpu" and not tensor.requires_grad
    assert [t.tolist() for t in tensors] == [[0.5], [0.5], [1.5], [2.0], [7.0, 8.0]]
    assert isinstance(back["summary"], Summary) and back["summary"].notes == "ok"
    assert isinstance(back["points"][0], Point) and back["losses"][1][1] == "x"
    assert back["again"] is back["points"][1].value  # one tensor, referenced twice
    assert back["plain"] == 3
    assert value["summary"].loss.requires_grad  # the caller's value is left as it was


def test_a_returned_module_keeps_its_parameters() -> None:
    model = torch.nn.Linear(3, 2)
    model.weight.requires_grad_(False)
    back = pickle.loads(host_pickle({"model": model}))["model"]
    assert [type(p) for p in back.parameters()] == [torch.nn.Parameter] * 2
    assert [p.requires_grad for p in back.parameters()] == [False, True]
    assert torch.equal(back.weight, model.weight) and torch.equal(back.bias, model.bias)
