"""What a decorated call ships, and the mistakes it refuses before anything is
queued. No server is needed for any of it: the refusals come first, which the
tests show by pointing the client at a port nobody listens on."""

from __future__ import annotations

import importlib
import io
import pickle
import sys
import threading
import types
import zipfile
from pathlib import Path

import pytest

import trainplane
from trainplane.net import free_port
from trainplane.sdk.call_errors import CallTooLarge, ModuleNotShippable, Unpicklable
from trainplane.sdk.distributed import InvalidOptions, build_spec, job_name
from trainplane.sdk.shipping import pack, pickled_modules
from trainplane.shipped_calls import (
    PAYLOAD_PATH,
    SHIPPED_FUNCTION,
    ShippedCallError,
    pack_call,
    unpack_call,
)


@pytest.fixture
def nobody() -> trainplane.Client:
    """A client of a server that does not exist: any request would fail."""
    return trainplane.Client(f"http://127.0.0.1:{free_port()}")


@pytest.fixture
def caller_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Local modules beside the caller: one it uses, the helper that one
    imports, and a package."""
    (tmp_path / "ship_models.py").write_text("import ship_helpers\nSCALE = ship_helpers.TWO\n")
    (tmp_path / "ship_helpers.py").write_text("TWO = 2\n")
    (tmp_path / "ship_pkg").mkdir()
    (tmp_path / "ship_pkg" / "__init__.py").write_text("")
    (tmp_path / "ship_pkg" / "layers.py").write_text("WIDTH = 8\n")
    (tmp_path / "ship_pkg" / "vocab.txt").write_text("a\nb\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("ship_models", "ship_helpers", "ship_pkg", "ship_pkg.layers"):
        sys.modules.pop(name, None)


def _files(bundle: bytes) -> list[str]:
    return sorted(zipfile.ZipFile(io.BytesIO(bundle)).namelist())


def test_local_modules_ship_with_the_call_and_installed_ones_do_not(caller_modules):
    import ship_models
    import ship_pkg.layers
    import torch

    def train(ctx, n):
        import json  # the standard library: the cluster's own

        return ship_models.SCALE * ship_pkg.layers.WIDTH * n, torch.__version__, json

    packed = pack(train, (3,), {})
    assert packed.modules == ("ship_helpers", "ship_models", "ship_pkg")
    assert _files(packed.bundle) == [
        PAYLOAD_PATH,
        "ship_helpers.py",
        "ship_models.py",
        "ship_pkg/__init__.py",
        "ship_pkg/layers.py",
        "ship_pkg/vocab.txt",
    ]
    payload = zipfile.ZipFile(io.BytesIO(packed.bundle)).read(PAYLOAD_PATH)
    call = unpack_call(payload)
    assert call.args == (3,) and call.name.endswith("train")
    assert call.function(None, 2)[0] == 2 * 8 * 2


def test_a_module_imported_only_inside_the_function_ships_too(caller_modules):
    importlib.import_module("ship_models")  # loaded here, as a notebook's import would

    def train(ctx):
        import ship_models

        return ship_models.SCALE

    assert "ship_models" in pack(train, (), {}).modules


def test_the_modules_are_read_from_the_pickle_without_running_it():
    data = pickle.dumps([Path("x"), threading.Event], protocol=5)
    assert {"pathlib", "threading"} <= pickled_modules(data)


def test_the_same_call_makes_the_same_bundle(caller_modules):
    def train(ctx, n):
        return n

    assert pack(train, (1,), {}).digest == pack(train, (1,), {}).digest
    assert pack(train, (1,), {}).digest != pack(train, (2,), {}).digest


def test_an_unpicklable_global_is_named_down_to_the_attribute(nobody):
    class Settings:
        def __init__(self) -> None:
            self.options = {"retries": 3, "lock": threading.Lock()}

    settings = Settings()

    @trainplane.distributed(gpus=2, client=nobody, progress=False)
    def train(ctx):
        return settings.options

    with pytest.raises(Unpicklable) as raised:
        train()
    message = str(raised.value)
    assert "the closed-over variable 'settings'.options['lock']" in message
    assert "_thread.lock" in message and "Create it inside the function" in message


def test_an_unpicklable_argument_is_named(nobody):
    @trainplane.distributed(client=nobody, progress=False)
    def train(ctx, data, *, log):
        return data

    with open(__file__, "rb") as handle, pytest.raises(Unpicklable, match=r"'log' \(_io.Buff"):
        train([1, 2], log=handle)
    with pytest.raises(Unpicklable, match=r"argument 0\[1\]"):
        train([1, threading.Lock()], log=None)


def test_a_module_that_cannot_ship_is_named(nobody, tmp_path, monkeypatch):
    # A namespace package (no __init__.py) has no file to ship.
    (tmp_path / "ship_namespace").mkdir()
    (tmp_path / "ship_namespace" / "part.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import ship_namespace.part

    # A module made in memory has none either.
    ghost = types.ModuleType("ship_ghost")
    ghost.VALUE = 2
    monkeypatch.setitem(sys.modules, "ship_ghost", ghost)

    @trainplane.distributed(client=nobody, progress=False)
    def uses_namespace(ctx):
        return ship_namespace.part.VALUE

    @trainplane.distributed(client=nobody, progress=False)
    def uses_ghost(ctx):
        import ship_ghost

        return ship_ghost.VALUE

    try:
        with pytest.raises(ModuleNotShippable, match=r"'ship_namespace' .* a namespace package"):
            uses_namespace()
        with pytest.raises(ModuleNotShippable, match=r"'ship_ghost' .* made in memory"):
            uses_ghost()
    finally:
        sys.modules.pop("ship_namespace.part", None)
        sys.modules.pop("ship_namespace", None)


def test_arguments_too_large_to_ship_are_refused_with_a_hint(nobody):
    @trainplane.distributed(client=nobody, progress=False, max_payload_bytes=1 << 20)
    def train(ctx, table, name):
        return len(table)

    with pytest.raises(CallTooLarge) as raised:
        train(b"x" * (2 << 20), "small")
    message = str(raised.value)
    assert "argument 0 is 2.0 MiB" in message and "over the 1 MiB" in message
    assert "storage" in message


def test_options_that_make_no_valid_spec_fail_when_decorating():
    def train(ctx):
        return None

    with pytest.raises(InvalidOptions, match=r"resources.gpus: Input should be greater"):
        trainplane.distributed(gpus=0)(train)
    with pytest.raises(InvalidOptions, match=r"strategy.type"):
        trainplane.distributed(strategy="zero-infinity")(train)
    with pytest.raises(InvalidOptions, match=r"colour: Extra inputs are not permitted"):
        trainplane.distributed(colour="blue")(train)
    with pytest.raises(InvalidOptions, match=r"strategy: deepspeed .* need strategy.type dee"):
        trainplane.distributed(strategy="ddp", deepspeed={"stage": 2})(train)


def test_the_options_become_the_jobs_spec(monkeypatch):
    monkeypatch.setenv("TRAINPLANE_PROJECT", "vision")

    def fine_tune_step(ctx):
        return None

    spec = build_spec(
        fine_tune_step,
        {
            "gpus": 8,
            "gpus_per_node": 4,
            "strategy": "deepspeed",
            "deepspeed": {"stage": 3},
            "checkpoint": {"every_steps": 100},
            "retries": {"max_restarts": 2},
            "env": {"A": "1"},
            "spec": {"tracking": {"experiment": "sdk"}, "checkpoint": {"keep_last": 1}},
        },
        "sha256:" + "1" * 64,
    )
    assert spec["project"] == "vision" and spec["name"] == "fine_tune_step"
    assert spec["resources"] == {"gpus": 8, "gpus_per_node": 4}
    assert spec["strategy"] == {"type": "deepspeed", "deepspeed": {"stage": 3}}
    assert spec["checkpoint"] == {"every_steps": 100, "keep_last": 1}
    assert spec["entrypoint"]["function"] == SHIPPED_FUNCTION
    assert spec["entrypoint"]["code"] == "sha256:" + "1" * 64
    assert spec["entrypoint"]["env"] == {"A": "1"}
    assert job_name(lambda ctx: None) == "lambda"


def test_a_payload_from_another_python_is_refused_before_unpickling_it():
    payload = pickle.loads(pack_call(pickle.dumps((len, (), {})), "m.f"))
    payload["python"] = "2.7"
    with pytest.raises(ShippedCallError, match=r"pickled by Python 2\.7"):
        unpack_call(pickle.dumps(payload))
    with pytest.raises(ShippedCallError, match="unreadable"):
        unpack_call(b"garbage")
