"""Reading checkpoints without running code from them.

A checkpoint is data a job wrote, and a job is tenant code: a file in it may
be a pickle whose ``__reduce__`` runs anything on whoever unpickles it. So
every checkpoint file trainplane reads back is read with
``torch.load(weights_only=True)``, whose unpickler builds only tensors, plain
Python values (numbers, strings, lists, tuples, dicts) and the types
allowlisted here. A file that needs any other type is refused with
UnsafeCheckpoint, and nothing of it runs.

Formats that need more than tensors and plain values, and why each is safe:

- numpy values (the RNG file's numpy generator state; numbers a train
  function keeps in ``ctx.state``): numpy's array and scalar reconstructors,
  ``numpy.ndarray`` and ``numpy.dtype``. They build arrays and scalars from
  raw bytes; an object array's items come from the same restricted unpickler.
- torch.distributed.checkpoint (FSDP's ``dcp/``): torch writes its
  ``.metadata`` with plain ``pickle.dump`` and reads it back with
  ``pickle.load``, and loads non-tensor items with ``weights_only=False``.
  trainplane reads the metadata with an unpickler that resolves only DCP's
  metadata dataclasses and enum, ``torch.Size``, dtypes, layouts and
  ``pathlib`` paths (data holders with no code of their own on unpickling),
  and loads the items with ``weights_only=True``.
- DeepSpeed's own files: its checkpoint engine's load is replaced, while
  loading, by ``weights_only=True`` with its loss scalers, ``ZeroStageEnum``
  and ``fragment_address`` allowlisted (plain classes, dataclasses and an
  enum, restored by setting attributes). Universal checkpoints, which
  DeepSpeed reads with ``weights_only=False`` itself, are refused.

What a train function puts in ``ctx.state`` must fit those rules: a save
whose state would not load back is refused at save time, naming the value.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import pickle
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch


class UnsafeCheckpoint(RuntimeError):
    """A checkpoint file holds something that loading would have to run code for."""


def _numpy_values() -> list[Any]:
    try:
        import numpy
    except ImportError:
        return []
    multiarray = getattr(numpy, "_core", None) or numpy.core
    return [
        multiarray.multiarray._reconstruct,
        multiarray.multiarray.scalar,
        numpy.ndarray,
        numpy.dtype,
        *(
            getattr(numpy.dtypes, name)
            for name in dir(getattr(numpy, "dtypes", None))
            if name.endswith("DType")
        ),
    ]


def load_file(
    path: Path | str | io.BytesIO,
    *,
    what: str,
    map_location: Any = None,
    allowed: Sequence[Any] = (),
) -> Any:
    """``path`` loaded with weights_only=True, numpy values and the types in
    ``allowed`` allowed; UnsafeCheckpoint (naming ``what``) when it needs
    anything more."""
    try:
        with torch.serialization.safe_globals([*_numpy_values(), *allowed]):
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UnsafeCheckpoint(
            f"{what} holds something that only unpickling code could load; refusing it "
            f"({str(exc).splitlines()[0][:300]})"
        ) from None


def check_loadable(state: Any, *, what: str) -> None:
    """Raises ValueError when ``state`` saved would not load back under
    load_file's rules: found at save time, not at a resume hours later."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    try:
        load_file(buffer, what=what)
    except UnsafeCheckpoint as exc:
        raise ValueError(
            f"{exc}. Keep numbers, strings, lists, dicts, tensors and numpy values in it"
        ) from None


# --- torch.distributed.checkpoint (FSDP) -------------------------------------------


def _dcp_metadata_types() -> dict[tuple[str, str], Any]:
    from torch.distributed.checkpoint import filesystem, metadata

    allowed: dict[tuple[str, str], Any] = {
        (metadata.__name__, name): getattr(metadata, name)
        for name in (
            "Metadata",
            "MetadataIndex",
            "StorageMeta",
            "TensorProperties",
            "TensorStorageMetadata",
            "ChunkStorageMetadata",
            "BytesStorageMetadata",
            "_MEM_FORMAT_ENCODING",
        )
        if hasattr(metadata, name)
    }
    allowed[(filesystem.__name__, "_StorageInfo")] = filesystem._StorageInfo
    allowed[("torch", "Size")] = torch.Size
    allowed[("torch.serialization", "_get_layout")] = torch.serialization._get_layout
    for name in dir(torch):
        value = getattr(torch, name, None)
        if isinstance(value, torch.dtype | torch.layout | torch.memory_format):
            allowed[("torch", name)] = value
    for kind in (pathlib.PosixPath, pathlib.PurePosixPath, pathlib.Path, pathlib.PurePath):
        allowed[("pathlib", kind.__name__)] = kind
    return allowed


class _MetadataUnpickler(pickle.Unpickler):
    """Resolves only the globals in ``allowed``; anything else is refused."""

    def __init__(self, file: Any, allowed: dict[tuple[str, str], Any]) -> None:
        super().__init__(file)
        self.allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self.allowed[(module, name)]
        except KeyError:
            raise UnsafeCheckpoint(
                f"the checkpoint's DCP metadata names {module}.{name}, which is not "
                "checkpoint metadata; refusing to unpickle it"
            ) from None


def dcp_load(state: dict[str, Any], checkpoint_dir: Path) -> None:
    """``torch.distributed.checkpoint.load`` into ``state``, reading nothing
    by unpickling code (see the module docstring)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._traverse import set_element
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.metadata import StorageMeta

    allowed = _dcp_metadata_types()
    # DCP reports a failure inside it as its own CheckpointException, in
    # words; the refusal itself is kept here to be raised as it is.
    refused: list[UnsafeCheckpoint] = []

    def unpickle(metadata_file: Any) -> Any:
        try:
            return _MetadataUnpickler(metadata_file, allowed).load()
        except UnsafeCheckpoint as exc:
            refused.append(exc)
            raise

    class Reader(dcp.FileSystemReader):
        # FileSystemReader.read_metadata, with the restricted unpickler in
        # place of pickle.load.
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            path = self._get_metadata_path(kwargs.get("rank"))
            with self.fs.create_stream(path, "rb") as metadata_file:
                metadata = unpickle(metadata_file)
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    class Planner(DefaultLoadPlanner):
        # DefaultLoadPlanner.load_bytes, with weights_only=True.
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            fqn = read_item.dest_index.fqn
            try:
                loaded = load_file(value, what=f"checkpoint item {fqn}")
            except UnsafeCheckpoint as exc:
                refused.append(exc)
                raise
            if self.flatten_state_dict:
                set_element(self.original_state_dict, self.mappings[fqn], loaded)
            else:
                self.state_dict[fqn] = loaded

    try:
        dcp.load(state, storage_reader=Reader(checkpoint_dir), planner=Planner())
    except (Exception, dcp.api.CheckpointException):  # the latter is a BaseException
        if refused:
            raise refused[0] from None
        raise


# --- DeepSpeed -----------------------------------------------------------------------


def _deepspeed_types() -> list[Any]:
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address]


class _WeightsOnlyEngine:
    """A DeepSpeed checkpoint engine whose load unpickles no code; anything
    else goes to the engine it stands in for."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def load(self, path: str, map_location: Any = None) -> Any:
        what = f"DeepSpeed checkpoint file {Path(path).name}"
        return load_file(path, what=what, map_location=map_location, allowed=_deepspeed_types())


@contextlib.contextmanager
def deepspeed_weights_only(engine: Any) -> Iterator[None]:
    """While inside, ``engine.load_checkpoint`` reads its files with
    weights_only=True."""
    if engine.load_universal_checkpoint():
        raise UnsafeCheckpoint(
            "DeepSpeed universal checkpoints are loaded by unpickling; trainplane resumes "
            "only its own DeepSpeed checkpoints: remove checkpoint.load_universal from "
            "strategy.deepspeed.config"
        )
    original = engine.checkpoint_engine
    engine.checkpoint_engine = _WeightsOnlyEngine(original)
    try:
        yield
    finally:
        engine.checkpoint_engine = original
