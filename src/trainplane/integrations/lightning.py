"""A Lightning ``Trainer`` under trainplane: metrics, checkpoints, resume and
preemption through :mod:`trainplane.script`.

    from trainplane.integrations.lightning import TrainplaneCallback, resume_ckpt_path

    trainer = L.Trainer(..., callbacks=[TrainplaneCallback()])
    trainer.fit(model, data, ckpt_path=resume_ckpt_path())

What the callback does, on every rank at the same points (Lightning calls a
callback's hooks on every process):

- metrics: every ``log_every_n_steps`` optimizer steps (the Trainer's, unless
  given) and after each validation, what the module logged
  (``trainer.callback_metrics``) is reported at ``trainer.global_step``;
- checkpoints: by the job's policy (``checkpoint.every_steps`` and
  ``every_minutes`` of the spec), the callback itself calls
  ``trainer.save_checkpoint`` into :func:`trainplane.script.checkpoint_dir`
  and publishes it with :func:`trainplane.script.checkpoint`. It does this
  rather than hooking Lightning's ``ModelCheckpoint`` because the job's spec,
  not the script, says when to save, a stop request must save at once at any
  step, and every rank must publish at the same step (which
  ``ModelCheckpoint``'s own schedule and top-k pruning do not promise). A
  ``ModelCheckpoint`` the script keeps goes on saving where it says, unpublished;
- a stop request (preemption): :func:`trainplane.script.should_stop` is asked
  after every optimizer step (collective: every rank asks at the same step);
  on a yes the callback saves (the checkpoint's reason is "preempted") and sets
  ``trainer.should_stop``, so ``fit`` returns and the script ends with 0.

Resume: :func:`resume_ckpt_path` names the checkpoint file in
:func:`trainplane.script.resume_from` (None on a fresh start), for
``trainer.fit(..., ckpt_path=...)``; Lightning then restores the model, the
optimizers, the loops and ``global_step``, so steps continue from it.

Lightning is imported here only: trainplane itself never needs it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from trainplane import script

CHECKPOINT_FILE = "lightning.ckpt"  # a file, or a folder for sharded strategies


def resume_ckpt_path() -> str | None:
    """The Lightning checkpoint to resume from, for ``trainer.fit(ckpt_path=...)``:
    the one this callback published in the job's latest checkpoint, or else the
    only ``*.ckpt`` in it; None on a fresh start."""
    folder = script.resume_from()
    if folder is None:
        return None
    ours = Path(folder) / CHECKPOINT_FILE
    if ours.exists():
        return str(ours)
    others = sorted(Path(folder).glob("*.ckpt"))
    if len(others) == 1:
        return str(others[0])
    raise FileNotFoundError(
        f"trainplane: the checkpoint to resume from ({folder}) holds no {CHECKPOINT_FILE}"
        f" and {len(others)} other *.ckpt: cannot tell which one to resume from"
    )


def _policy() -> Mapping[str, Any]:
    """The job's checkpoint policy from its spec; empty outside trainplane."""
    document = os.environ.get("TRAINPLANE_SPEC")
    if not document:
        return {}
    return json.loads(document).get("checkpoint") or {}


def _numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The scalar values of Lightning's metrics, as floats."""
    numbers: dict[str, float] = {}
    for name, value in metrics.items():
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                continue
            value = value.item()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            numbers[name] = float(value)
    return numbers


class TrainplaneCallback(pl.Callback):
    """Reports, checkpoints and stops a Lightning ``Trainer`` as the job says.

    ``log_every_n_steps``: how often metrics are reported (default: the
    Trainer's). ``every_steps`` / ``every_minutes``: when to checkpoint
    (default: the job spec's ``checkpoint`` section; neither: only when asked
    to stop)."""

    def __init__(
        self,
        *,
        log_every_n_steps: int | None = None,
        every_steps: int | None = None,
        every_minutes: float | None = None,
    ) -> None:
        policy = _policy()
        self.log_every_n_steps = log_every_n_steps
        self.every_steps = every_steps if every_steps is not None else policy.get("every_steps")
        self.every_minutes = (
            every_minutes if every_minutes is not None else policy.get("every_minutes")
        )
        self._last_step = -1  # the last optimizer step the hooks acted on
        self._saved_step = -1  # the last step published
        self._saved_at = time.monotonic()

    # --- hooks ------------------------------------------------------------------
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last_step = self._saved_step = trainer.global_step
        self._saved_at = time.monotonic()
        if trainer.global_step and trainer.is_global_zero:
            print(f"trainplane: resumed from checkpoint step {trainer.global_step}", flush=True)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        step = trainer.global_step
        if step == self._last_step:
            return  # a micro-batch of gradient accumulation: no optimizer step yet
        self._last_step = step
        every = self.log_every_n_steps or trainer.log_every_n_steps or 1
        if step % every == 0:
            script.report(_numbers(trainer.callback_metrics), step=step)
        stop = script.should_stop()  # collective: every rank, every step
        if stop or self._due(trainer, step):
            self.save(trainer)
        if stop:
            if trainer.is_global_zero:
                print(f"trainplane: asked to stop; stopping after the checkpoint at step {step}")
            trainer.should_stop = True

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            script.report(_numbers(trainer.callback_metrics), step=trainer.global_step)

    # --- checkpoints ------------------------------------------------------------
    def save(self, trainer: pl.Trainer) -> str | None:
        """Save the Trainer's state and publish it as this step's checkpoint
        (every rank, at the same step). Returns its URI on rank 0."""
        step = trainer.global_step
        if step == self._saved_step:
            return None  # already published (a stop request at a policy step)
        trainer.save_checkpoint(
            os.path.join(script.checkpoint_dir(), CHECKPOINT_FILE), weights_only=False
        )
        uri = script.checkpoint(step, metrics=_numbers(trainer.callback_metrics))
        self._saved_step = step
        self._saved_at = time.monotonic()
        return uri

    def _due(self, trainer: pl.Trainer, step: int) -> bool:
        """Whether the policy asks for a save at ``step``; the same answer on
        every rank (for a time-based policy, rank 0's clock decides)."""
        if self.every_steps and step // self.every_steps > self._saved_step // self.every_steps:
            return True
        if self.every_minutes:
            elapsed = time.monotonic() - self._saved_at >= self.every_minutes * 60
            return bool(trainer.strategy.broadcast(elapsed, src=0))
        return False
