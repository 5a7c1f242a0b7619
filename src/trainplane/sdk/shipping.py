"""Packing a call of a decorated function into a code bundle, with every
mistake a notebook user can make caught here, before anything is queued:

- something the call needs cannot be pickled: the error names it (a global,
  a closed-over variable, an argument, down to the attribute that fails);
- a module of the caller's own is needed but cannot be shipped (a compiled
  extension, a namespace package, a module with no file);
- the arguments are too large to ship with a call (use storage instead).

What ships: the cloudpickle of ``(function, args, kwargs)`` (functions and
classes of ``__main__``, a notebook's cells, go by value) and the source of
the caller's local modules that the call refers to or imports, with the
local modules loaded beside them. Installed packages (``pip install``, the
standard library) are the cluster's to have.
"""

from __future__ import annotations

import dis
import functools
import importlib.metadata
import pickletools
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainplane.code_bundles import MAX_BUNDLE_BYTES, SKIPPED_NAMES, build_bundle, digest_of
from trainplane.sdk.call_errors import CallTooLarge, ModuleNotShippable, Unpicklable
from trainplane.shipped_calls import PAYLOAD_PATH, pack_call

MAX_PAYLOAD_BYTES = 16 << 20
_SEARCH_DEPTH = 4
_SEARCH_BREADTH = 200


@dataclass(frozen=True)
class PackedCall:
    name: str  # module.qualname of the function
    bundle: bytes
    digest: str
    payload_bytes: int
    modules: tuple[str, ...]  # the local modules shipped with it


def pack(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    max_payload_bytes: int = MAX_PAYLOAD_BYTES,
) -> PackedCall:
    import cloudpickle

    name = qualified_name(function)
    try:
        call_pickle = cloudpickle.dumps((function, args, kwargs), protocol=5)
    except Exception as exc:
        raise Unpicklable(_unpicklable_message(name, function, args, kwargs, exc)) from None
    if len(call_pickle) > max_payload_bytes:
        raise CallTooLarge(
            _too_large_message(name, args, kwargs, len(call_pickle), max_payload_bytes)
        )
    modules = local_modules(pickled_modules(call_pickle) | imported_names(function))
    files = [(PAYLOAD_PATH, pack_call(call_pickle, name))]
    for module in modules:
        files.extend(module_files(module))
    bundle = build_bundle(files)
    if len(bundle) > MAX_BUNDLE_BYTES:
        sizes = sorted((sum(len(c) for _, c in module_files(m)), m.__name__) for m in modules)
        biggest = f"; the largest module is {sizes[-1][1]}" if sizes else ""
        raise CallTooLarge(
            f"{name}: the code to ship zips to {len(bundle) >> 20} MiB, over the "
            f"{MAX_BUNDLE_BYTES >> 20} MiB limit{biggest}: keep data files out of your "
            "modules' folders and read them from storage"
        )
    return PackedCall(
        name=name,
        bundle=bundle,
        digest=digest_of(bundle),
        payload_bytes=len(call_pickle),
        modules=tuple(m.__name__ for m in modules),
    )


def qualified_name(function: Callable[..., Any]) -> str:
    module = getattr(function, "__module__", None) or "__main__"
    return f"{module}.{getattr(function, '__qualname__', repr(function))}"


# --- which modules the call needs ------------------------------------------------------


def pickled_modules(data: bytes) -> set[str]:
    """Modules the pickle refers to by reference (its GLOBAL opcodes), read
    from the opcodes without unpickling anything."""
    modules: set[str] = set()
    pushed: list[Any] = []  # a value per opcode, strings kept: what STACK_GLOBAL reads
    memo: dict[int, Any] = {}
    # cloudpickle ships a module object as a call of its subimport(name).
    next_string_is_module = False
    for opcode, arg, _ in pickletools.genops(data):
        if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
            pushed.append(arg)
            if next_string_is_module:
                modules.add(arg)
                next_string_is_module = False
        elif opcode.name == "MEMOIZE":
            memo[len(memo)] = pushed[-1] if pushed else None
        elif opcode.name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = pushed[-1] if pushed else None
        elif opcode.name in ("GET", "BINGET", "LONG_BINGET"):
            pushed.append(memo.get(arg))
        elif opcode.name == "STACK_GLOBAL":
            if len(pushed) >= 2 and isinstance(pushed[-2], str):
                modules.add(pushed[-2])
                next_string_is_module = pushed[-2].startswith("cloudpickle") and pushed[-1] in (
                    "subimport",
                    "dynamic_subimport",
                )
            pushed.append(None)
        elif opcode.name in ("GLOBAL", "INST"):
            modules.add(str(arg).split(" ")[0])
            pushed.append(None)
        else:
            pushed.append(None)
    return modules


def imported_names(function: Callable[..., Any]) -> set[str]:
    """Modules the function's code uses: the ones it imports when it runs
    (``import x`` in the body) and the modules among its globals, and the same
    of the functions it calls by name that ship by value."""
    names: set[str] = set()
    seen: set[int] = set()

    def walk(code: types.CodeType, scope: dict[str, Any], depth: int) -> None:
        if id(code) in seen or depth > _SEARCH_DEPTH:
            return
        seen.add(id(code))
        for instruction in dis.get_instructions(code):
            if instruction.opname == "IMPORT_NAME":
                names.add(str(instruction.argval))
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                walk(const, scope, depth + 1)
        for global_name in code.co_names:
            value = scope.get(global_name)
            if isinstance(value, types.ModuleType):
                # cloudpickle ships a module global as an import by name.
                names.add(value.__name__)
            elif isinstance(value, types.FunctionType) and _ships_by_value(value):
                walk(value.__code__, value.__globals__, depth + 1)

    code = getattr(function, "__code__", None)
    if isinstance(code, types.CodeType):
        walk(code, getattr(function, "__globals__", {}), 0)
    return names


def _ships_by_value(function: types.FunctionType) -> bool:
    return function.__module__ == "__main__" or function.__module__ not in sys.modules


def local_modules(names: set[str]) -> list[types.ModuleType]:
    """The caller's own top-level modules among ``names``, with the local
    modules loaded from the same folders (what those import in turn)."""
    tops = {name.partition(".")[0] for name in names if name}
    chosen: dict[str, types.ModuleType] = {}
    for top in sorted(tops):
        module = sys.modules.get(top)
        if module is None or not _is_local(top):
            continue
        _check_shippable(module)
        chosen[top] = module
    folders = {_root_of(module) for module in chosen.values()}
    for top, module in list(sys.modules.items()):
        if "." in top or top in chosen or not _is_local(top):
            continue
        if getattr(module, "__file__", None) and _root_of(module) in folders:
            try:
                _check_shippable(module)
            except ModuleNotShippable:
                continue  # a neighbour that is not needed by name
            chosen[top] = module
    return [chosen[name] for name in sorted(chosen)]


def _is_local(top: str) -> bool:
    if top in ("__main__", "__mp_main__", "builtins") or top in sys.builtin_module_names:
        return False
    if top in sys.stdlib_module_names or top in _installed_top_levels():
        return False
    module = sys.modules.get(top)
    path = getattr(module, "__file__", None) or ""
    return not any(part in ("site-packages", "dist-packages") for part in Path(path).parts)


@functools.cache
def _installed_top_levels() -> frozenset[str]:
    return frozenset(importlib.metadata.packages_distributions())


def _check_shippable(module: types.ModuleType) -> None:
    name = module.__name__
    file = getattr(module, "__file__", None)
    if file is None:
        kind = "a namespace package" if hasattr(module, "__path__") else "made in memory"
        raise ModuleNotShippable(
            f"module '{name}' is needed on the cluster but is {kind}, with no file to ship: "
            "make it a .py file or a package with an __init__.py next to your code, "
            "or install it on the cluster (pip=[...])"
        )
    if not file.endswith(".py"):
        raise ModuleNotShippable(
            f"module '{name}' is needed on the cluster but is a compiled file ({file}), "
            "which cannot be shipped with the call: install it on the cluster "
            "(pip=[...] or the worker image)"
        )


def _root_of(module: types.ModuleType) -> Path:
    """The folder on sys.path the module was imported from."""
    file = Path(module.__file__ or "").resolve()
    return file.parent.parent if hasattr(module, "__path__") else file.parent


def module_files(module: types.ModuleType) -> Iterator[tuple[str, bytes]]:
    file = Path(module.__file__ or "").resolve()
    if not hasattr(module, "__path__"):
        yield file.name, file.read_bytes()
        return
    package = file.parent
    for path in sorted(package.rglob("*")):
        relative = path.relative_to(package.parent)
        if any(part in SKIPPED_NAMES or part.startswith(".") for part in relative.parts):
            continue
        if path.is_file() and not path.is_symlink() and path.suffix != ".pyc":
            yield relative.as_posix(), path.read_bytes()


# --- naming what cannot be shipped ----------------------------------------------------


def _unpicklable_message(
    name: str, function: Any, args: tuple[Any, ...], kwargs: dict[str, Any], exc: Exception
) -> str:
    found = find_unpicklable(function, args, kwargs)
    if found is None:
        return f"{name} cannot be shipped to the cluster: {type(exc).__name__}: {exc}"
    where, value, error = found
    return (
        f"{name} cannot be shipped to the cluster: {where} ({type(value).__module__}."
        f"{type(value).__qualname__}) cannot be pickled: {error}. Create it inside the "
        "function, or pass what it is made from (a path, a config) instead"
    )


def find_unpicklable(
    function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, Any, str] | None:
    """(where, the value, the pickling error) of the innermost part of the
    call that cannot be pickled, or None when no single part is to blame."""
    candidates: list[tuple[str, Any]] = [(f"argument {i}", a) for i, a in enumerate(args)]
    candidates += [(f"argument {k!r}", v) for k, v in kwargs.items()]
    candidates += list(_function_parts(function))
    for where, value in candidates:
        found = _innermost(where, value, 0)
        if found is not None:
            return found
    return None


def _function_parts(function: Any) -> Iterator[tuple[str, Any]]:
    code = getattr(function, "__code__", None)
    if code is None:
        return
    for var, cell in zip(code.co_freevars, function.__closure__ or (), strict=False):
        try:
            yield f"the closed-over variable '{var}'", cell.cell_contents
        except ValueError:
            continue  # an empty cell
    scope = getattr(function, "__globals__", {})
    for global_name in code.co_names:
        if global_name in scope and not isinstance(scope[global_name], types.ModuleType):
            value = scope[global_name]
            if isinstance(value, types.FunctionType) and _ships_by_value(value):
                yield from (
                    (f"{where} of {global_name}()", part) for where, part in _function_parts(value)
                )
            else:
                yield f"the global '{global_name}'", value


def _pickling_error(value: Any) -> str | None:
    import cloudpickle

    try:
        cloudpickle.dumps(value, protocol=5)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _innermost(where: str, value: Any, depth: int) -> tuple[str, Any, str] | None:
    error = _pickling_error(value)
    if error is None:
        return None
    if depth < _SEARCH_DEPTH:
        for part_where, part in _parts(where, value):
            found = _innermost(part_where, part, depth + 1)
            if found is not None:
                return found
    return where, value, error


def _parts(where: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for i, (key, item) in enumerate(value.items()):
            if i >= _SEARCH_BREADTH:
                return
            yield f"{where}[{key!r}]", item
    elif isinstance(value, list | tuple | set | frozenset):
        for i, item in enumerate(value):
            if i >= _SEARCH_BREADTH:
                return
            yield f"{where}[{i}]", item
    else:
        attributes = getattr(value, "__dict__", None)
        if isinstance(attributes, dict):
            for i, (key, item) in enumerate(attributes.items()):
                if i >= _SEARCH_BREADTH:
                    return
                yield f"{where}.{key}", item


def _too_large_message(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any], size: int, limit: int
) -> str:
    import cloudpickle

    sizes = []
    for where, value in [(f"argument {i}", a) for i, a in enumerate(args)] + [
        (f"argument {k!r}", v) for k, v in kwargs.items()
    ]:
        sizes.append((len(cloudpickle.dumps(value, protocol=5)), where))
    largest = ""
    if sizes:
        biggest, where = max(sizes)
        largest = f" ({where} is {biggest / 2**20:.1f} MiB)"
    return (
        f"the call of {name} pickles to {size / 2**20:.1f} MiB{largest}, over the "
        f"{limit >> 20} MiB a call can ship: put large data in storage (an s3:// URI or "
        "a path the cluster can read) and pass its location instead"
    )
