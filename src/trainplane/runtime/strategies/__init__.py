"""How a model and optimizer are wrapped, stepped and saved under each
``strategy.type``. User code calls the same TrainContext methods for all."""

from __future__ import annotations

from trainplane.runtime.strategies.base import StrategyRunner, StrategySettings


def make_runner(settings: StrategySettings) -> StrategyRunner:
    kind = settings.strategy.get("type", "ddp")
    if kind == "ddp":
        from trainplane.runtime.strategies.ddp import DDPRunner

        return DDPRunner(settings)
    if kind == "fsdp":
        from trainplane.runtime.strategies.fsdp import FSDPRunner

        return FSDPRunner(settings)
    if kind == "deepspeed":
        from trainplane.runtime.strategies.deepspeed import DeepSpeedRunner

        return DeepSpeedRunner(settings)
    raise ValueError(f"strategy.type {kind!r} cannot run (auto must be resolved at submit)")


__all__ = ["StrategyRunner", "StrategySettings", "make_runner"]
