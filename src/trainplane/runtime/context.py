"""``trainplane.TrainContext``: what a train function receives.

The same user code runs under every strategy::

    def train(ctx: trainplane.TrainContext):
        loader = ctx.data_loader(dataset, batch_size=32)
        model, optimizer = ctx.prepare(model, torch.optim.AdamW(model.parameters()))
        ctx.restore()                       # resume from the latest checkpoint, if any
        for batch in loader.forever():
            loss = compute_loss(model, batch)
            ctx.backward(loss)
            if ctx.step():                  # True when the optimizer stepped
                ctx.report({"loss": loss.detach()})  # checkpoints by the job's policy
            if ctx.global_step >= max_steps:
                break

Every method that touches model state (prepare, restore, report, checkpoint) is
collective: call it on every rank, at the same steps (``report`` meets the
other ranks only about once a second: runtime.step_sync).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.runtime import rng
from trainplane.runtime.checkpointing import (
    Checkpointer,
    numeric,
    read_rank_rng,
    read_trainer_state,
)
from trainplane.runtime.data import ResumableLoader
from trainplane.runtime.gpu_figures import GpuFigures
from trainplane.runtime.model_export import ModelExport, ModelSaver
from trainplane.runtime.precision import set_matmul_precision, training_precision
from trainplane.runtime.preemption import Preempted, checkpoint_reason
from trainplane.runtime.reporting import ProgressReporter
from trainplane.runtime.step_log import StepLog
from trainplane.runtime.step_sync import StepSync
from trainplane.runtime.strategies import StrategyRunner, StrategySettings, make_runner
from trainplane.runtime.strategies.base import OptimizerArg


class TrainContext:
    def __init__(
        self,
        spec: TrainSpec | FinetuneSpec,
        *,
        rank: int,
        local_rank: int,
        world_size: int,
        local_world_size: int = 1,
        node_rank: int = 0,
        device: torch.device,
        job_id: str | None = None,
        attempt_id: str | None = None,
        checkpoint_root: str | None = None,
        model_root: str | None = None,
        reporter: ProgressReporter | None = None,
        watch_stop_requests: bool = False,
        decision_steps: list[int] | tuple[int, ...] = (),
    ) -> None:
        self.spec = spec
        self.rank = rank
        self.local_rank = local_rank
        self.world_size = world_size
        self.local_world_size = local_world_size
        self.node_rank = node_rank
        self.device = device
        self.job_id = job_id
        self.attempt_id = attempt_id
        self.args: dict[str, Any] = (
            dict(spec.entrypoint.args) if isinstance(spec, TrainSpec) else {}
        )
        self.strategy: str = spec.strategy.type
        # Unset: bf16 on GPUs, fp32 on CPU (see trainplane.jobs.precision).
        self.precision: str = training_precision(spec.precision, device)
        set_matmul_precision(spec.precision, device)
        # A fine-tune's recipe steps by its hyperparameters.
        optimization = spec.optimization if isinstance(spec, TrainSpec) else spec.hyperparameters
        self.grad_accum: int = optimization.grad_accum
        self.max_grad_norm: float | None = optimization.max_grad_norm
        self.global_step = 0
        self.total_steps: int | None = None
        # The caller's own values to keep in checkpoints (e.g. the best eval loss).
        self.state: dict[str, Any] = {}
        self.resumed_from: str | None = None
        self._runner: StrategyRunner | None = None
        self._lr_scheduler: Any = None
        self._loaders: list[ResumableLoader] = []
        self._micro = 0
        self._reporter = reporter if rank == 0 else None
        # True on every rank when a control plane may ask the attempt to stop
        # (it answers rank 0's reports): then each report checks, collectively.
        self._watch_stop = watch_stop_requests
        self._checkpointer = Checkpointer(
            checkpoint_root,
            spec.checkpoint,
            rank=rank,
            world_size=world_size,
            strategy=self.strategy,
            job_id=job_id,
            attempt_id=attempt_id,
            log=self.log,
        )
        # With register_model, the trained model is exported for the control
        # plane to register (see trainplane.runtime.model_export).
        self._export = (
            ModelExport(
                model_root,
                rank=rank,
                world_size=world_size,
                strategy=self.strategy,
                job_id=job_id,
                attempt_id=attempt_id,
                log=self.log,
            )
            if spec.register_model is not None and model_root
            else None
        )
        self._last_metrics: dict[str, float] = {}
        self._exported_at: int | None = None
        self._policy_step = 0
        self._step_log = StepLog(rank=rank, world_size=world_size, grad_accum=self.grad_accum)
        self._gpu_figures = GpuFigures(device, world_size=world_size, rank=rank)
        self._sync = StepSync(
            world_size=world_size,
            device=device,
            decision_steps=decision_steps,
            reporter=self._reporter,
            step_log=self._step_log,
        )
        self.started_at = time.monotonic()

    # --- where am I -----------------------------------------------------------------
    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def log(self, message: str) -> None:
        """Print once (rank 0), into the job's log."""
        if self.rank == 0:
            print(message, flush=True)

    def barrier(self) -> None:
        if dist.is_initialized() and self.world_size > 1:
            dist.barrier()

    def mean(self, value: float | torch.Tensor) -> float:
        """The mean of ``value`` over all ranks (e.g. an eval loss). A collective
        (call it on every rank): an all-reduce that waits for the slowest rank
        and, on a GPU, its kernels. Not every step: ``report`` averages tensors
        in batches, or reduce once per report interval."""
        tensor = torch.as_tensor(value, dtype=torch.float64, device=self._comm_device()).clone()
        if dist.is_initialized() and self.world_size > 1:
            dist.all_reduce(tensor)
            tensor /= self.world_size
        return float(tensor.item())

    def _comm_device(self) -> torch.device:
        return self.device if self.device.type == "cuda" else torch.device("cpu")

    # --- data ---------------------------------------------------------------------
    def data_loader(
        self,
        dataset: Any,
        *,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        num_workers: int = 0,
        tokens_per_sample: int | None = None,
    ) -> ResumableLoader:
        """This rank's share of ``dataset`` in batches of ``batch_size`` (per rank).
        Its position is saved in checkpoints and restored by ``restore()``."""
        loader = ResumableLoader(
            dataset,
            batch_size=batch_size,
            rank=self.rank,
            world_size=self.world_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            collate_fn=collate_fn,
            num_workers=num_workers,
            pin_memory=self.device.type == "cuda",
            tokens_per_sample=tokens_per_sample,
        )
        self._loaders.append(loader)
        return loader

    # --- model ----------------------------------------------------------------------
    def prepare(
        self,
        model: torch.nn.Module,
        optimizer: OptimizerArg,
        lr_scheduler: Callable[[torch.optim.Optimizer], Any] | None = None,
        *,
        save_frozen: bool = True,
    ) -> tuple[Any, Any]:
        """Apply the job's strategy. ``optimizer`` is an optimizer over
        ``model.parameters()`` or a function of the parameters that builds one;
        ``lr_scheduler`` is a function of the final torch optimizer. Use the returned
        model and optimizer from here on.

        ``save_frozen=False`` leaves the parameters that do not train out of
        checkpoints (for an adapter on a big frozen model, the checkpoint is
        the adapter): only when the code before ``prepare`` rebuilds them the
        same on resume, e.g. loads them from the same files."""
        if self._runner is not None:
            raise RuntimeError("prepare() is called once per TrainContext")
        if lr_scheduler is not None and not callable(lr_scheduler):
            raise TypeError("lr_scheduler is a function of the optimizer, e.g. lambda o: ...")
        self._runner = make_runner(self._settings(save_frozen=save_frozen))
        if self._export is not None:
            self._export.capture(model)
        prepared_model, prepared_optimizer = self._runner.prepare(model, optimizer)
        if lr_scheduler is not None:
            self._lr_scheduler = lr_scheduler(self._runner.base_optimizer)
        return prepared_model, prepared_optimizer

    def model_init(self) -> contextlib.AbstractContextManager[None]:
        """Build the model inside this (on every rank), then pass it to
        ``prepare``: under DeepSpeed ZeRO-3 each parameter is partitioned over
        the ranks as it is created, so no rank ever holds the whole model
        (Hugging Face ``from_pretrained`` loads each rank's share). Under FSDP2
        every rank but 0 builds it on the meta device (no memory) and
        ``prepare`` fills their shards from rank 0's weights, so only rank 0
        holds the whole model, in host memory; ``from_pretrained`` refuses a
        meta device, so load the weights there on rank 0 and build from the
        config elsewhere (``from_config``), as the fine-tune recipe does.
        Under DDP it changes nothing::

            with ctx.model_init():
                model = MyModel()
        """
        return make_runner(self._settings()).init_context()

    def _settings(self, *, save_frozen: bool = True) -> StrategySettings:
        return StrategySettings(
            strategy=self.spec.strategy,
            precision=self.precision,
            device=self.device,
            rank=self.rank,
            local_rank=self.local_rank,
            world_size=self.world_size,
            grad_accum=self.grad_accum,
            max_grad_norm=self.max_grad_norm,
            micro_batch_size=self._loaders[0].batch_size if self._loaders else None,
            save_frozen=save_frozen,
        )

    def unwrap(self) -> torch.nn.Module:
        """The user's module inside the strategy's wrapper."""
        return self._prepared().unwrapped()

    def _prepared(self) -> StrategyRunner:
        if self._runner is None:
            raise RuntimeError("call ctx.prepare(model, optimizer) first")
        return self._runner

    def learning_rate(self) -> float:
        """The optimizer's current learning rate (of its first parameter group)."""
        optimizer = self._prepared().base_optimizer
        return float(optimizer.param_groups[0]["lr"]) if optimizer is not None else 0.0

    # --- one micro-batch ------------------------------------------------------------
    def backward(self, loss: torch.Tensor) -> None:
        runner = self._prepared()
        self._micro += 1
        boundary = self._micro % self.grad_accum == 0
        if self.grad_accum > 1 and not runner.scales_loss_itself():
            loss = loss / self.grad_accum
        runner.backward(loss, boundary=boundary)

    def step(self) -> bool:
        """Step the optimizer at the end of each ``optimization.grad_accum``
        micro-batches (and the LR scheduler with it); True when it stepped."""
        runner = self._prepared()
        if self._micro % self.grad_accum != 0:
            runner.micro_step()
            return False
        runner.step()
        if self._lr_scheduler is not None:
            self._lr_scheduler.step()
        self.global_step += 1
        return True

    # --- progress and checkpoints ------------------------------------------------------
    def report(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """Record metrics at ``step`` (default: optimizer steps so far), then save a
        checkpoint if the job's policy asks for one. A number is rank 0's; a
        one-element tensor (``loss.detach()``) is averaged over the ranks, in
        batches (runtime.step_sync): give every rank's tensors the same names."""
        step = self.global_step if step is None else step
        tensors = {k: v for k, v in metrics.items() if isinstance(v, torch.Tensor)}
        values = numeric({k: v for k, v in metrics.items() if k not in tensors})
        throughput: dict[str, float] = {}
        self._step_log.add_throughput(throughput, step, self._loaders)
        self._sync.add(step, values, tensors, throughput)
        save_by_steps = self._checkpointer.due_by_steps(self._policy_step, step)
        if not (save_by_steps or self._sync.meets_at(step)):
            return
        latest = self._sync.flush(self.total_steps, figures=self._gpu_figures)
        self._last_metrics = dict(latest.values)
        values = latest.metrics()
        heard = self._reporter.stop_reason if self._reporter is not None else None
        asked = checkpoint_reason(heard) if heard is not None and self._watch_stop else None
        time_due = self.rank == 0 and self._checkpointer.due_by_time()
        meeting = self._sync.meet(step, stop=asked, time_due=time_due)
        if self._watch_stop and meeting.stop is not None:
            self._stop_for_preemption(values, step, meeting.stop)
        if save_by_steps or (meeting.time_due and step > self._policy_step):
            self.checkpoint(values, step=step)

    def _stop_for_preemption(self, values: dict[str, float], step: int, reason: str) -> None:
        """Preempted or pruned: save with that reason, then unwind every rank."""
        if self._checkpointer.storage is not None:
            self.checkpoint(values, step=step, reason=reason)
            self.log(f"trainplane: {reason}; stopping after the checkpoint at step {step}")
        else:
            self.log(f"trainplane: {reason}; this job has no checkpoint storage to save to")
        raise Preempted(f"{reason} at step {step}", reason)

    def checkpoint(
        self,
        metrics: dict[str, Any] | None = None,
        step: int | None = None,
        *,
        reason: str | None = None,
    ) -> str:
        """Save a checkpoint now; returns its URI."""
        runner = self._prepared()
        step = self.global_step if step is None else step
        self._sync.flush(self.total_steps)  # what is pending reaches the control plane first
        state = {
            "global_step": self.global_step,
            "micro": self._micro,
            "lr_scheduler": (
                self._lr_scheduler.state_dict() if self._lr_scheduler is not None else None
            ),
            "loaders": [loader.state_dict() for loader in self._loaders],
            "user": self.state,
            "strategy": runner.extra_state(),
        }
        uri = self._checkpointer.save(
            step,
            numeric(metrics or {}),
            write_files=runner.save,
            trainer_state=state,
            format=runner.format,
            reason=reason,
        )
        self._policy_step = step
        if self._reporter is not None:
            # A run resumed from this checkpoint reports only the steps after
            # it: make sure the ones up to it have reached the control plane.
            self._reporter.flush()
        return uri

    def restore(self) -> int:
        """Load the latest complete checkpoint (per ``checkpoint.resume``) into
        the prepared model and optimizer, the LR scheduler, the data loaders, the
        RNGs and ``ctx.state``. Returns the step it resumed at (0 when none)."""
        runner = self._prepared()
        point = self._checkpointer.find_resume_point()
        if point is None:
            return 0
        folder, manifest = self._checkpointer.open_for_reading(*point)
        try:
            if manifest.format != runner.format:
                raise RuntimeError(
                    f"checkpoint {point[1]} was saved by strategy {manifest.strategy} "
                    f"({manifest.format}); strategy {self.strategy} cannot load it"
                )
            if runner.format == "deepspeed" and manifest.world_size != self.world_size:
                raise RuntimeError(
                    f"checkpoint {point[1]} was saved by {manifest.world_size} DeepSpeed "
                    f"workers; it loads only at the same world size, not {self.world_size}"
                )
            runner.load(folder)
            state = read_trainer_state(folder)
            own_rng = (
                read_rank_rng(folder, self.rank) if manifest.world_size == self.world_size else None
            )
        finally:
            self.barrier()
            self._checkpointer.done_reading()
        self.global_step = int(state["global_step"])
        self._micro = int(state["micro"])
        if self._lr_scheduler is not None and state.get("lr_scheduler") is not None:
            self._lr_scheduler.load_state_dict(state["lr_scheduler"])
        for loader, loader_state in zip(self._loaders, state.get("loaders") or [], strict=False):
            loader.load_state_dict(loader_state)
        self.state = dict(state.get("user") or {})
        runner.load_extra_state(state.get("strategy") or {})
        if own_rng is not None:
            rng.restore(own_rng)
        self._policy_step = manifest.step
        self.resumed_from = f"{point[0]}/{point[1]}"
        self.log(f"trainplane: resumed from checkpoint step {manifest.step} ({self.resumed_from})")
        return manifest.step

    # --- the trained model -----------------------------------------------------------
    def set_input_example(self, *tensors: torch.Tensor) -> None:
        """What the model takes, for the registered model's signature. Needed
        only when its forward takes more than positional tensors; otherwise the
        first batch the model sees is used."""
        if self._export is not None:
            self._export.set_input_example(*tensors)

    def export_with(self, saver: ModelSaver) -> None:
        """Write the exported model with ``saver`` instead of as a pytorch
        MLflow model (the fine-tune recipe writes a transformers one). It is
        called on rank 0 with the rebuilt model and an empty folder."""
        if self._export is not None:
            self._export.saver = saver

    def export_model(self) -> str | None:
        """Export the prepared model for ``register_model``; returns the model
        folder's URI, or None when the job registers no model. trainplane
        calls it when the train function returns (a second call at the same
        step does nothing); collective."""
        self._sync.flush(self.total_steps)  # the last reports since the ranks last met
        if self._export is None:
            return None
        if self._runner is None:
            raise RuntimeError(
                "register_model is set, but the train function never called "
                "ctx.prepare(model, optimizer): there is no model to register"
            )
        if self._exported_at != self.global_step:
            self._export.export(self._runner, step=self.global_step, metrics=self._last_metrics)
            self._exported_at = self.global_step
        return self._export.root

    def close(self) -> None:
        if self._reporter is not None:
            self._reporter.close()
