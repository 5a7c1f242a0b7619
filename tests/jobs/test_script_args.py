"""entrypoint.args reach a script or command as flags its own parser reads
back (argparse, Hugging Face's HfArgumentParser), and the spec refuses what
could not be passed so."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field

import pytest
from pydantic import ValidationError

from tests.factories import train_spec
from trainplane.jobs.entrypoints import command_of, flags_of
from trainplane.jobs.spec import TrainSpec, parse_spec, spec_errors

ARGS = {
    "lr": 0.1,
    "epochs": 3,
    "name": "run one",
    "fp16": False,
    "packing": True,
    "layers": [64, 32],
    "extra": {"a": 1},
    "skip": None,
    "output_dir": "out",
}


def _entrypoint(**entrypoint):
    spec = parse_spec(train_spec(entrypoint=entrypoint))
    assert isinstance(spec, TrainSpec)
    return spec.entrypoint


def test_args_follow_the_script_and_the_command_as_flags():
    script = command_of(_entrypoint(script="train.py", args={"lr": 0.1, "fast": True}))
    assert script == ["python", "train.py", "--lr", "0.1", "--fast", "true"]
    command = command_of(_entrypoint(command=["accelerate", "launch", "t.py"], args=ARGS))
    assert command[:3] == ["accelerate", "launch", "t.py"]
    assert command[3:] == flags_of(ARGS)
    assert "--skip" not in command
    assert command[command.index("--layers") + 1] == "[64, 32]"
    assert json.loads(command[command.index("--extra") + 1]) == {"a": 1}
    assert command_of(_entrypoint(function="m:f", args={"lr": 1})) is None


def test_argparse_reads_the_flags_back():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float)
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--name", type=str)
    parser.add_argument("--fp16", type=lambda text: text == "true")
    parser.add_argument("--packing", type=lambda text: text == "true")
    parser.add_argument("--layers", type=json.loads)
    parser.add_argument("--extra", type=json.loads)
    parser.add_argument("--skip", type=int, default=7)
    parser.add_argument("--output_dir")
    parsed = parser.parse_args(flags_of(ARGS))
    assert (parsed.lr, parsed.epochs, parsed.name) == (0.1, 3, "run one")
    assert (parsed.fp16, parsed.packing) == (False, True)
    assert (parsed.layers, parsed.extra, parsed.skip) == ([64, 32], {"a": 1}, 7)


@dataclass
class ScriptArguments:
    lr: float = 1.0
    epochs: int = 1
    packing: bool = False
    fp16: bool = True
    name: str = "x"
    layers: list[int] = field(default_factory=list)


def test_hf_argument_parser_reads_the_flags_back():
    transformers = pytest.importorskip("transformers")
    args = {k: ARGS[k] for k in ("lr", "epochs", "packing", "fp16", "name")}
    parser = transformers.HfArgumentParser(ScriptArguments)
    (parsed,) = parser.parse_args_into_dataclasses(args=flags_of(args))
    assert parsed == ScriptArguments(lr=0.1, epochs=3, packing=True, fp16=False, name="run one")


def test_a_bad_args_key_is_named_for_scripts_only():
    with pytest.raises(ValidationError) as caught:
        _entrypoint(command=["x"], args={"ok": 1, "two words": 1, "-dash": 2})
    described = spec_errors(caught.value)
    assert "`entrypoint.args.two words`:" in described
    assert "`entrypoint.args.-dash`:" in described
    assert "entrypoint.args.ok" not in described
    # A function takes its args as keyword arguments: flag rules do not apply.
    assert _entrypoint(function="m:f", args={"two words": 1}).args == {"two words": 1}


@pytest.mark.parametrize("script", ["train.py --lr 1", "-m", "my script.py", "a.py\tb"])
def test_a_script_is_one_file_path(script):
    with pytest.raises(ValidationError) as caught:
        _entrypoint(script=script)
    described = spec_errors(caught.value)
    assert described.startswith("`entrypoint.script`:")
    assert "put flags in entrypoint.args or use entrypoint.command" in described


def test_scripts_and_commands_may_register_their_model():
    for entrypoint in ({"script": "sub/train.py"}, {"command": ["torchrun", "t.py"]}):
        spec = parse_spec(train_spec(entrypoint=entrypoint, register_model={"name": "m"}))
        assert spec.register_model is not None and spec.register_model.name == "m"
