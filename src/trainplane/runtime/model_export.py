"""Exporting the trained model when a job asks for ``register_model``: an
MLflow model (pytorch flavor) in the job's model folder, which the control
plane then logs to the job's run and registers (``trainplane.tracking``).

The model is rebuilt outside the strategy's wrapper, so the registered model is
the user's own module whatever the strategy: when ``prepare()`` is called the
exporter copies the module's structure onto the meta device (buffers are kept,
parameters take no memory), and at the end it loads the full state dict, which
the strategy gathers onto rank 0, into that copy.

The first forward call's tensors are kept (two samples) as the input example.
With it MLflow stores the model as a ``torch.export`` program (``pt2``), which
loads without the job's code and without unpickling anything. A model that
cannot be traced is stored pickled instead, with its module's code inside.
"""

from __future__ import annotations

import copy
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainplane.runtime.collective import broadcast
from trainplane.storage import exported_models as layout
from trainplane.storage import files
from trainplane.storage.backends import open_storage
from trainplane.storage.checkpoints import FileEntry

EXAMPLE_ROWS = 2  # more than one, so the batch dimension is exported as dynamic


class ModelExportError(RuntimeError):
    """The model could not be exported; the message says why."""


@dataclass(frozen=True)
class SavedModel:
    """What a saver wrote into the export folder: the MLflow model in
    ``mlflow/`` and, under ``extras``, more MLflow models (artifact name ->
    folder) the control plane logs to the same run."""

    flavor: str
    serialization: str
    extras: dict[str, str] = field(default_factory=dict)


# Writes the rebuilt model into an (empty) export folder.
ModelSaver = Callable[[torch.nn.Module, Path], SavedModel]


def structure_of(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` whose parameters live on the meta device (no
    memory) and whose buffers are host copies; shared parameters stay shared."""
    memo: dict[int, Any] = {}
    for parameter in model.parameters():
        shape, dtype = _shape_and_dtype(parameter)
        memo[id(parameter)] = torch.nn.Parameter(
            torch.empty(shape, dtype=dtype, device="meta"), requires_grad=parameter.requires_grad
        )
    for buffer in model.buffers():
        memo[id(buffer)] = buffer.detach().to("cpu", copy=True)
    return copy.deepcopy(model, memo)


def _shape_and_dtype(parameter: torch.nn.Parameter) -> tuple[torch.Size, torch.dtype]:
    """A parameter ZeRO-3 partitioned as it was built (``TrainContext.model_init``)
    holds only this rank's share, already in the 16-bit training dtype: its
    whole shape is ``ds_shape``, and one that trains is exported as its fp32
    master."""
    if not hasattr(parameter, "ds_shape"):
        return parameter.shape, parameter.dtype
    trains = parameter.requires_grad and parameter.is_floating_point()
    return parameter.ds_shape, torch.float32 if trains else parameter.dtype


def rebuilt(structure: torch.nn.Module, state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """``structure`` holding ``state``, each tensor in the dtype the user's
    module had (DeepSpeed hands back its fp32 master weights). A tensor
    shared under several names (tied weights) is loaded once and stays shared."""
    wanted = structure.state_dict(keep_vars=True)
    first: dict[int, str] = {}
    tied = {}  # name -> the first name of the same tensor
    for name, tensor in wanted.items():
        if first.setdefault(id(tensor), name) != name:
            tied[name] = first[id(tensor)]
    cast = {
        key: value.to(wanted[key].dtype) if key in wanted else value
        for key, value in state.items()
        if key not in tied
    }
    missing, unexpected = structure.load_state_dict(cast, strict=False, assign=True)
    missing = [key for key in missing if key not in tied]
    if missing or unexpected:
        raise ModelExportError(
            f"the gathered state does not fit the model (missing {missing[:5]}, "
            f"unexpected {unexpected[:5]})"
        )
    for name, source in tied.items():
        owner, _, attribute = name.rpartition(".")
        source_owner, _, source_attribute = source.rpartition(".")
        shared = getattr(structure.get_submodule(source_owner), source_attribute)
        setattr(structure.get_submodule(owner), attribute, shared)
    return structure.eval()


def base_version(version: str) -> str:
    """``2.13.0+cpu`` -> ``2.13.0``: local builds are not on the package index."""
    return version.split("+", 1)[0]


@dataclass(frozen=True)
class ModelOrigin:
    """Where an exported model comes from, for its manifest."""

    strategy: str
    world_size: int
    job_id: str | None
    attempt_id: str | None


def publish_model(
    root: str,
    save: Callable[[Path], SavedModel],
    *,
    step: int,
    metrics: dict[str, float],
    origin: ModelOrigin,
    log: Callable[[str], None] = print,
) -> layout.ModelManifest:
    """``save`` the model into a staging folder, replace the export at
    ``root`` with it, and write its manifest last (storage.exported_models)."""
    storage = open_storage(root)
    with files.staging_folder(storage, "", "export") as staging:
        saved = save(staging)
        layout.clear(storage)
        entries = files.publish(storage, staging, "")
    manifest = layout.ModelManifest(
        flavor=saved.flavor,
        serialization=saved.serialization,
        extras=saved.extras,
        step=step,
        metrics=metrics,
        strategy=origin.strategy,
        world_size=origin.world_size,
        files=[FileEntry(**entry) for entry in entries],
        job_id=origin.job_id,
        attempt_id=origin.attempt_id,
    )
    layout.write_manifest(storage, manifest)
    size = manifest.size_bytes / 1e6
    log(
        f"trainplane: model exported for registration ({saved.flavor}, "
        f"{saved.serialization}, {size:.1f} MB) to {root}"
    )
    return manifest


class ModelExport:
    """One per TrainContext; ``export`` is collective."""

    def __init__(
        self,
        root: str,
        *,
        rank: int,
        world_size: int,
        strategy: str,
        job_id: str | None,
        attempt_id: str | None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.root = root
        self.rank = rank
        self.world_size = world_size
        self.strategy = strategy
        self.job_id = job_id
        self.attempt_id = attempt_id
        self.log = log
        self.structure: torch.nn.Module | None = None
        self.problem: str | None = None
        self.example: tuple[torch.Tensor, ...] | None = None
        self.example_problem = "the model was never called"
        self.saver: ModelSaver = self._save_pytorch
        self._hook: Any = None

    # --- while training ----------------------------------------------------------
    def capture(self, model: torch.nn.Module) -> None:
        """Called by prepare(), before the strategy wraps or shards ``model``."""
        if self.rank == 0:
            try:
                self.structure = structure_of(model)
            except Exception as exc:  # an attribute deepcopy cannot copy, say
                self.problem = f"cannot copy the model's structure: {type(exc).__name__}: {exc}"
        if self.rank == 0 and self.example is None:
            self._hook = model.register_forward_pre_hook(self._remember_input, with_kwargs=True)

    def set_input_example(self, *tensors: torch.Tensor) -> None:
        self.example = tuple(_sample(t) for t in tensors)

    def _remember_input(self, _module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._hook.remove()
        if self.example is not None:
            return
        if kwargs or not args or not all(isinstance(a, torch.Tensor) for a in args):
            self.example_problem = "the model's forward takes more than positional tensors"
            return
        self.example = tuple(_sample(a) for a in args)

    # --- at the end ------------------------------------------------------------------
    def export(self, runner: Any, *, step: int, metrics: dict[str, float]) -> None:
        """Gather the model, write it as an MLflow model and its manifest.
        Raises ModelExportError on every rank if any part failed."""
        state = runner.full_state_dict()
        error = None
        if self.rank == 0:
            try:
                self._write(state, step=step, metrics=metrics)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
        error = broadcast(error)
        if error:
            raise ModelExportError(f"the trained model was not exported: {error}")

    def _write(self, state: dict[str, torch.Tensor] | None, *, step: int, metrics: Any) -> None:
        if self.problem:
            raise ModelExportError(self.problem)
        assert self.structure is not None and state is not None
        model = rebuilt(self.structure, state)
        origin = ModelOrigin(self.strategy, self.world_size, self.job_id, self.attempt_id)
        publish_model(
            self.root,
            lambda staging: self.saver(model, staging),
            step=step,
            metrics=metrics,
            origin=origin,
            log=self.log,
        )

    def _save_pytorch(self, model: torch.nn.Module, folder: Path) -> SavedModel:
        return SavedModel("pytorch", self._save(model, folder / layout.MLFLOW_FOLDER))

    def _save(self, model: torch.nn.Module, path: Path) -> str:
        import mlflow.pytorch

        requirements = [f"torch=={base_version(torch.__version__)}"]
        if self.example is not None:
            example = tuple(
                t.float().numpy() if t.is_floating_point() else t.numpy() for t in self.example
            )
            try:
                with torch.no_grad():
                    mlflow.pytorch.save_model(
                        model,
                        str(path),
                        serialization_format="pt2",
                        input_example=example[0] if len(example) == 1 else example,
                        pip_requirements=requirements,
                    )
                return "pt2"
            except Exception as exc:
                reason = f"torch.export cannot trace it ({type(exc).__name__}: {exc})"
                shutil.rmtree(path, ignore_errors=True)
        else:
            reason = f"no input example ({self.example_problem}; see ctx.set_input_example)"
        self.log(
            f"trainplane: saving the model pickled, since {reason[:500]}; loading it needs "
            "MLFLOW_ALLOW_PICKLE_DESERIALIZATION=true"
        )
        _pickle_own_code_by_value(model)
        mlflow.pytorch.save_model(
            model, str(path), serialization_format="pickle", pip_requirements=requirements
        )
        return "pickle"


def _sample(tensor: torch.Tensor) -> torch.Tensor:
    rows = tensor[:EXAMPLE_ROWS] if tensor.dim() else tensor
    return rows.detach().to("cpu", copy=True)


def _pickle_own_code_by_value(model: torch.nn.Module) -> None:
    """The job's own modules (from its working_dir) go into the pickle, so the
    model loads where that code is not installed."""
    import cloudpickle

    here = Path.cwd().resolve()
    for module_type in {type(m) for m in model.modules()}:
        module = sys.modules.get(module_type.__module__)
        source = getattr(module, "__file__", None)
        if module is not None and source and Path(source).resolve().is_relative_to(here):
            cloudpickle.register_pickle_by_value(module)
