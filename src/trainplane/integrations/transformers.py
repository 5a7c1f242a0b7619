"""A Hugging Face ``Trainer`` (and TRL's ``SFTTrainer``, ``DPOTrainer``, ...)
under trainplane: metrics, checkpoints, resume and preemption through
:mod:`trainplane.script`::

    from trainplane.integrations.transformers import (
        TrainplaneCallback, model_dir, resume_from, trainer_arguments)

    args = SFTConfig(max_steps=100, **trainer_arguments())  # the spec's strategy
    trainer = SFTTrainer(..., args=args, callbacks=[TrainplaneCallback()])
    trainer.train(resume_from_checkpoint=resume_from())
    trainer.save_model(model_dir())

What the callback does (the Trainer calls a callback's hooks on every rank):

- metrics: what the Trainer logs (``on_log``: loss, learning rate, eval
  metrics, ...) is reported at ``state.global_step``;
- checkpoints: each ``checkpoint-N`` folder the Trainer saves (``on_save``)
  is published as the job's checkpoint ``step-N`` by every rank together, so
  the shards FSDP and DeepSpeed write on each rank make one checkpoint. The
  job's ``checkpoint.every_steps`` and ``every_minutes`` make the Trainer
  save at those points too, whatever its own ``save_strategy`` (decided in
  ``on_step_end``; :func:`trainer_arguments` also sets ``save_steps`` from it);
- a stop request (preemption): :func:`trainplane.script.should_stop` is
  asked after every optimizer step (collective: every rank asks at the same
  step); on a yes the callback sets ``should_save`` and
  ``should_training_stop``, so the Trainer saves (published with the reason
  "preempted") and ``train()`` returns: the script ends with 0 and the job
  resumes from that checkpoint later.

Resume: :func:`resume_from` is the published checkpoint's local folder (a
``checkpoint-N`` folder as the Trainer saved it) or None, as
``trainer.train(resume_from_checkpoint=...)`` takes it; the Trainer restores
the weights, optimizer, scheduler, RNG and ``global_step`` from it.

Transformers is imported here only: trainplane itself never needs it.
"""

from __future__ import annotations

import os
import time
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from trainplane import script
from trainplane.integrations.hf_arguments import (
    job_spec,
    let_accelerate_shard_on_cpu,
    trainer_arguments,
    undo_cpu_label,
)

__all__ = ["TrainplaneCallback", "model_dir", "resume_from", "trainer_arguments"]


def resume_from() -> str | None:
    """The checkpoint to resume from, for ``trainer.train(resume_from_checkpoint=...)``;
    None on a fresh start."""
    return script.resume_from()


def model_dir() -> str:
    """Where to save the final model (``trainer.save_model(model_dir())``, on
    every rank: the Trainer writes from rank 0); with ``register_model`` it is
    registered when the job succeeds."""
    return script.model_dir()


class TrainplaneCallback(TrainerCallback):
    """Reports, publishes checkpoints and stops a ``Trainer`` as the job says.

    ``every_steps`` / ``every_minutes``: when to checkpoint besides the
    Trainer's own saves (default: the job spec's ``checkpoint`` section)."""

    def __init__(self, *, every_steps: int | None = None, every_minutes: float | None = None):
        spec = job_spec()
        # Built as the Trainer's argument: after its TrainingArguments, before it.
        self._labelled = let_accelerate_shard_on_cpu(spec)
        policy = spec.checkpoint if spec is not None else None
        self.every_steps = every_steps or (policy.every_steps if policy else None)
        self.every_minutes = every_minutes or (policy.every_minutes if policy else None)
        self.metrics: dict[str, float] = {}  # the latest value of each metric logged
        self.stopped = False  # a stop request was heard: train() ends after a save
        self._published_step = -1
        self._saved_at = time.monotonic()

    # --- hooks ------------------------------------------------------------------
    def on_init_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._labelled and _accelerate_type() != "FSDP":
            undo_cpu_label()
        if state.is_world_process_zero:
            for note in _strategy_notes(args):
                print(f"trainplane: {note}", flush=True)

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._published_step = state.global_step  # a resumed run's step is published already
        self._saved_at = time.monotonic()
        if state.global_step and state.is_world_process_zero:
            print(f"trainplane: resumed from checkpoint step {state.global_step}", flush=True)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        numbers = {
            name: float(value)
            for name, value in (logs or {}).items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        }
        if numbers:
            self.metrics.update(numbers)
            script.report(numbers, step=state.global_step)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        step = state.global_step
        if self._due(step):
            control.should_save = True
        if script.should_stop():  # collective: every rank, every step
            control.should_save = True
            control.should_training_stop = True
            if not self.stopped and state.is_world_process_zero:
                print(
                    f"trainplane: asked to stop; stopping after the checkpoint at step {step}",
                    flush=True,
                )
            self.stopped = True

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        step = state.global_step
        if step == self._published_step:
            return  # saved twice at one step (a step and an epoch boundary): published once
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{step}")
        # With save_on_each_node off, a node other than the first may have
        # had nothing to write; it still takes part in the publication.
        os.makedirs(folder, exist_ok=True)
        script.checkpoint(step, folder=folder, metrics=self.metrics)
        self._published_step = step
        self._saved_at = time.monotonic()

    # --- the job's policy ---------------------------------------------------------
    def _due(self, step: int) -> bool:
        """Whether the job's policy asks for a save at ``step``; the same answer
        on every rank (for a time-based policy, rank 0's clock decides)."""
        if self.every_steps and step % self.every_steps == 0:
            return True
        if self.every_minutes:
            from trainplane.runtime.stop_watch import broadcast_flag, process_group_size

            elapsed = time.monotonic() - self._saved_at >= self.every_minutes * 60
            return broadcast_flag(elapsed) if process_group_size() > 1 else elapsed
        return False


def _accelerate_type() -> str | None:
    """How Accelerate distributes this Trainer (``FSDP``, ``DEEPSPEED``,
    ``MULTI_CPU``, ...); None before it decided."""
    from accelerate.state import AcceleratorState

    decided = AcceleratorState._shared_state.get("distributed_type")
    return None if decided is None else str(getattr(decided, "name", decided))


def _strategy_notes(args: TrainingArguments) -> list[str]:
    """Where the Trainer's arguments do not follow the job's spec."""
    spec = job_spec()
    if spec is None:
        return []
    notes = []
    wanted = spec.strategy.type
    if wanted == "fsdp" and not args.fsdp:
        notes.append("strategy.type is fsdp but the Trainer is not set up for FSDP")
    elif wanted == "fsdp" and (kind := _accelerate_type()) not in (None, "FSDP"):
        # Accelerate turns FSDP on for GPU (and other accelerator) worlds only,
        # and the callback could not label this one (made before the arguments).
        return [
            f"strategy.type is fsdp, but Accelerate runs this Trainer as {kind}: "
            "it shards with FSDP on GPUs only"
        ]
    if wanted == "deepspeed" and not args.deepspeed:
        notes.append("strategy.type is deepspeed but the Trainer has no DeepSpeed config")
    if wanted == "ddp" and (args.fsdp or args.deepspeed):
        notes.append("strategy.type is ddp but the Trainer's arguments choose FSDP or DeepSpeed")
    if notes:
        notes.append("pass **trainer_arguments() to the Trainer's arguments to follow the spec")
    return notes
