"""Pydantic's validation errors of a job spec, as sentences that teach: each
names its field, says what the field takes, and suggests the fix where there
is one ("`strategy` is a mapping like `{type: ddp}`, not `ddp`"; "`resource`
is an unknown field: did you mean `resources`?").

The one translation layer: the API's 422 problems and the loaders of stored
specs both describe errors here, so a spec reads the same wherever it fails.
Each error comes once: the branches of a union that pydantic reports one by
one become a single message for their field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from trainplane.jobs.spec import SPEC_KINDS, FinetuneSpec, SweepSpec, TrainSpec
from trainplane.jobs.spec_hints import (
    EXAMPLES,
    REQUIRED,
    close_to,
    did_you_mean,
    dotted,
    fields_here,
    given,
    name_rule,
    show,
)
from trainplane.jobs.spec_tree import choices, container, core_type, field_at, model_at

ROOTS: dict[str, type[BaseModel]] = {
    "train": TrainSpec,
    "finetune": FinetuneSpec,
    "sweep": SweepSpec,
}
# The branch names pydantic gives a union's plain types.
_TYPE_TAGS = frozenset({"int", "float", "str", "bool", "none", "list", "dict", "bytes"})
_NUMBER_WORDS = (
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
)
_SUFFIXED = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMbBtT])\s*$")
_POWERS = {"k": 3, "m": 6, "b": 9, "t": 12}


@dataclass(frozen=True)
class SpecMessage:
    """One error: the field's dotted path ("" for the spec itself), the
    sentence, and pydantic's error type."""

    path: str
    message: str
    type: str


def describe(errors: list[Any], root: type[BaseModel] | None = None) -> list[SpecMessage]:
    """Each error of ``ValidationError.errors()`` as a sentence, once. The
    location may start with the spec's kind (the tagged union's branch),
    which picks the model when ``root`` is not given."""
    described: list[SpecMessage] = []
    seen: set[str] = set()
    for error in errors:
        model, shown, parts, branched = _located(list(error.get("loc") or ()), root)
        path = "kind" if str(error.get("type")).startswith("union_tag") else dotted(shown)
        message = _sentence(error, model, parts, path)
        key = path if branched else f"{path}\n{message}"
        if key not in seen:
            seen.add(key)
            described.append(SpecMessage(path, message, str(error.get("type", ""))))
    return described


@dataclass(frozen=True)
class _Fault:
    """What a sentence is made of: the field as named ("`resources.gpus`",
    or "the spec"), its path, the value given, pydantic's context, and the
    model and path to look the field up by."""

    field: str
    path: str
    value: Any
    ctx: dict[str, Any]
    root: type[BaseModel] | None
    parts: list[Any]


def messages(errors: list[Any], root: type[BaseModel] | None = None) -> str:
    """All of them in one line, for an exception's text."""
    return "; ".join(m.message for m in describe(errors, root))


def _located(
    loc: list[Any], root: type[BaseModel] | None
) -> tuple[type[BaseModel] | None, list[Any], list[Any], bool]:
    """The model, the field's path as shown, the path within that model, and
    whether a union's branch was dropped. A sweep's trial is a train or
    finetune spec: its fields are looked up in the one that has them."""
    if loc and loc[0] in SPEC_KINDS:
        root = ROOTS[loc.pop(0)]
    shown = [p for p in loc if not _branch(p)]
    parts = shown
    if root is SweepSpec and len(shown) > 1 and shown[0] == "trial":
        parts = shown[1:]
        parent = [str(p) for p in parts[:-1]]
        root = TrainSpec if model_at(TrainSpec, parent) is not None else FinetuneSpec
    return root, shown, parts, len(shown) != len(loc)


def _branch(part: Any) -> bool:
    """Whether a location part names a union's branch (``int``,
    ``list[int]``, ``function-after[...]``), not a field."""
    return isinstance(part, str) and ("[" in part or part in _TYPE_TAGS)


def _sentence(error: Any, root: type[BaseModel] | None, parts: list[Any], path: str) -> str:
    kind = str(error.get("type", ""))
    value = error.get("input")
    ctx = error.get("ctx") or {}
    field = f"`{path}`" if path else "the spec"
    handler = _BY_TYPE.get(kind)
    # A sweep re-raises its trial's errors with their words only (no input,
    # no context to build on): those words are the message, but for the
    # errors that the field's path says all of.
    reraised = set(ctx) == {"message"} and kind not in ("extra_forbidden", "missing")
    if handler is not None and not reraised:
        return handler(_Fault(field, path, value, ctx, root, parts))
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    if kind in _BOUNDS and _BOUNDS[kind][1] in ctx:
        return _bound(field, kind, value, ctx)
    if path and path not in message:
        return f"{field}: {message}"
    return message


def _mapping(f: _Fault) -> str:
    if not f.parts:
        return (
            "the spec must be a mapping of fields like `kind: train`, `name: ...`, "
            f"`entrypoint: ...`; got {given(f.value)}"
        )
    example = _mapping_example(f.root, f.parts, f.value)
    return f"{f.field} is a mapping like `{example}`, not {given(f.value)}"


def _mapping_example(root: type[BaseModel] | None, parts: list[Any], value: Any) -> str:
    """An example of the section built from the scalar given, where one of its
    fields takes it (`strategy: ddp` -> `{type: ddp}`)."""
    key = _generic(parts)
    if key == "entrypoint" and isinstance(value, str):
        form = "function" if ":" in value else "script" if value.endswith(".py") else None
        if form:
            return f"{{{form}: {show(value)}}}"
        return f"{{command: [{', '.join(value.split())}]}}"
    if key in ("entrypoint.env", "tracking.tags") and isinstance(value, list):
        pairs = [str(item).partition("=") for item in value]
        if pairs and all(sep for _, sep, _ in pairs):
            return "{" + ", ".join(f"{k}: {v}" for k, _, v in pairs) + "}"
    model = model_at(root, [p for p in parts if not isinstance(p, int)]) if root else None
    if model is not None and value is not None and not isinstance(value, list | dict):
        for name in _fitting_fields(model, value):
            return f"{{{name}: {show(value)}}}"
    return EXAMPLES.get(key, "{key: value}")


def _fitting_fields(model: type[BaseModel], value: Any) -> list[str]:
    """The fields of ``model`` that could hold a scalar: a literal that lists
    it first, then required fields, then the rest, each in the model's order."""
    literal, required, other = [], [], []
    for name, field in model.model_fields.items():
        allowed = choices(field.annotation)
        core = core_type(field.annotation)
        if allowed is not None:
            if str(value) in allowed:
                literal.append(name)
            continue
        fits = (
            (core is bool and isinstance(value, bool))
            or (core is int and isinstance(value, int) and not isinstance(value, bool))
            or (core is float and isinstance(value, int | float) and not isinstance(value, bool))
            or (core is str and isinstance(value, str))
        )
        if fits:
            (required if field.is_required() else other).append(name)
    return literal + required + other


def _field_info(f: _Fault) -> FieldInfo | None:
    return field_at(f.root, [str(p) for p in f.parts]) if f.root and f.parts else None


def _generic(parts: list[Any]) -> str:
    """The path without list indexes nor free-form keys, for the tables."""
    return ".".join(str(p) for p in parts if not isinstance(p, int))


def _list(f: _Fault) -> str:
    if isinstance(f.value, str):
        example = "[" + ", ".join(f.value.split()) + "]"
    elif f.value is not None and not isinstance(f.value, dict):
        example = f"[{show(f.value)}]"
    else:
        example = EXAMPLES.get(_generic(f.parts), "[first, second]")
    return f"{f.field} is a list like `{example}`, not {given(f.value)}"


def _whole_number(f: _Fault) -> str:
    example = _number_example(f, int)
    return f"{f.field} must be a whole number, like `{example}`; got {given(f.value)}"


def _number(f: _Fault) -> str:
    suffixed = _SUFFIXED.match(f.value) if isinstance(f.value, str) else None
    if suffixed:
        exponent = _POWERS[suffixed[2].lower()]
        return f"{f.field} must be a number: write `{f.value}` as `{suffixed[1]}e{exponent}`"
    example = _number_example(f, float)
    return f"{f.field} must be a number, like `{example}`; got {given(f.value)}"


def _number_example(f: _Fault, kind: type) -> str:
    """The number a wrong value most likely meant, else the field's default."""
    value = f.value
    if isinstance(value, str) and value.strip().lower() in _NUMBER_WORDS:
        return str(_NUMBER_WORDS.index(value.strip().lower()))
    if kind is int and isinstance(value, float):
        return str(max(1, round(value)))
    default = getattr(_field_info(f), "default", None)
    if isinstance(default, int | float) and not isinstance(default, bool) and default:
        return show(default)
    return "1"


def _boolean(f: _Fault) -> str:
    return f"{f.field} must be `true` or `false`; got {given(f.value)}"


def _text(f: _Fault) -> str:
    if isinstance(f.value, bool | int | float):
        what = "boolean" if isinstance(f.value, bool) else "number"
        quoted = f'"{show(f.value)}"'
        return f"{f.field} must be text; got the {what} `{show(f.value)}` (quote it: `{quoted}`)"
    return f"{f.field} must be text; got {given(f.value)}"


def _pattern(f: _Fault) -> str:
    rule = name_rule(_generic(f.parts), f.value)
    if rule is None:
        pattern = f.ctx.get("pattern", "")
        return f"{f.field} must match the pattern `{pattern}`; got {given(f.value)}"
    words, fixed = rule
    suggestion = f"; try `{fixed}`" if fixed else ""
    return f"{f.field} takes {words}; got {given(f.value)}{suggestion}"


def _literal(f: _Fault) -> str:
    field_info = _field_info(f)
    allowed = choices(field_info.annotation) if field_info is not None else None
    if allowed is None:
        allowed = re.findall(r"'([^']*)'", str(f.ctx.get("expected", "")))
    text = f"{f.field} must be {_choice(allowed)}; got {given(f.value)}"
    zero = isinstance(f.value, str) and f.value.lower().startswith("zero")
    if zero and _generic(f.parts) == "strategy.type":
        stage = f.value[-1] if f.value[-1:] in ("1", "2", "3") else "3"
        return (
            f"{text}; for ZeRO use `strategy: {{type: deepspeed, deepspeed: {{stage: {stage}}}}}`"
        )
    near = close_to(str(f.value), allowed) if isinstance(f.value, str | int) else []
    return f"{text}; did you mean `{near[0]}`?" if near else text


def _choice(words: list[str]) -> str:
    return _listed(words) if len(words) <= 2 else "one of " + _listed(words)


def _listed(words: list[str]) -> str:
    quoted = [f"`{w}`" for w in words]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def _missing(f: _Fault) -> str:
    what = REQUIRED.get(_generic(f.parts))
    if what is None:
        field_info = _field_info(f)
        what = "it is required"
        if field_info is not None:
            what += f" ({_kind_of(field_info.annotation)})"
    return f"{f.field} is missing: {what}"


def _kind_of(annotation: Any) -> str:
    allowed = choices(annotation)
    if allowed:
        return "one of " + _listed(allowed)
    kind, core = container(annotation)
    if kind is not None:
        return "a list" if kind == "list" else "a mapping"
    return {int: "a whole number", float: "a number", bool: "true or false", str: "text"}.get(
        core, "a mapping"
    )


def _unknown(f: _Fault) -> str:
    *parent, key = f.parts or [""]
    parent = [str(p) for p in parent]
    within = f.path[: len(f.path) - len(dotted(f.parts))]  # "trial." in a sweep
    guesses = [within + guess for guess in did_you_mean(f.root, parent, str(key))]
    if guesses:
        return f"{f.field} is an unknown field: did you mean {_listed(guesses)}?"
    known = fields_here(f.root, parent)
    if known:
        where = f"`{dotted(parent)}`" if parent else "a spec"
        return f"{f.field} is an unknown field; {where} takes {', '.join(known)}"
    return f"{f.field} is an unknown field (not part of the spec)"


_BOUNDS = {
    "greater_than": ("greater than", "gt"),
    "greater_than_equal": ("at least", "ge"),
    "less_than": ("less than", "lt"),
    "less_than_equal": ("at most", "le"),
}


def _bound(field: str, kind: str, value: Any, ctx: dict[str, Any]) -> str:
    words, key = _BOUNDS[kind]
    return f"{field} must be {words} {show(ctx.get(key))}; got {given(value)}"


def _too_short(f: _Fault) -> str:
    least = f.ctx.get("min_length", 1)
    return f"{f.field} needs at least {least} item{'s' if least != 1 else ''}; got none"


def _too_long(f: _Fault) -> str:
    most, count = f.ctx.get("max_length"), f.ctx.get("actual_length")
    return f"{f.field} takes at most {most} items; got {count}"


def _empty_text(f: _Fault) -> str:
    least = f.ctx.get("min_length", 1)
    if least > 1:
        return f"{f.field} takes at least {least} characters; got {len(str(f.value))}"
    return f"{f.field} must not be empty"


def _long_text(f: _Fault) -> str:
    most = f.ctx.get("max_length")
    return f"{f.field} takes at most {most} characters; got {len(str(f.value))}"


def _no_kind(f: _Fault) -> str:
    return f"`kind` is missing: say what the job is, one of {_listed(list(SPEC_KINDS))}"


def _bad_kind(f: _Fault) -> str:
    tag = f.value.get("kind") if isinstance(f.value, dict) else f.ctx.get("tag")
    text = f"`kind` must be {_choice(list(SPEC_KINDS))}; got {given(tag)}"
    near = close_to(str(tag), list(SPEC_KINDS))
    return f"{text}; did you mean `{near[0]}`?" if near else text


def _entrypoint_form(f: _Fault) -> str:
    got = f.ctx.get("got", "none")
    text = f"{f.field} needs exactly one of `function`, `script` or `command`"
    if got == "none":
        return f"{text}, like `{{script: train.py}}`; got none"
    return f"{text}; got {got}: keep one"


_BY_TYPE = {
    "model_type": _mapping,
    "model_attributes_type": _mapping,
    "dict_type": _mapping,
    "list_type": _list,
    "int_type": _whole_number,
    "int_parsing": _whole_number,
    "int_from_float": _whole_number,
    "float_type": _number,
    "float_parsing": _number,
    "bool_type": _boolean,
    "bool_parsing": _boolean,
    "string_type": _text,
    "string_pattern_mismatch": _pattern,
    "string_too_short": _empty_text,
    "string_too_long": _long_text,
    "too_short": _too_short,
    "too_long": _too_long,
    "literal_error": _literal,
    "enum": _literal,
    "missing": _missing,
    "extra_forbidden": _unknown,
    "union_tag_not_found": _no_kind,
    "union_tag_invalid": _bad_kind,
    "entrypoint_form": _entrypoint_form,
}
