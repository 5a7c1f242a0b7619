"""How a model and optimizer are wrapped, stepped and saved under each
``strategy.type``. User code calls the same TrainContext methods for all."""

from __future__ import annotations

from trainplane.runtime.strategies.base import StrategyRunner, StrategySettings


def make_runner(settings: StrategySettings) -> StrategyRunner:
    kind = settings.strategy.type
    if kind == "ddp":
        from trainplane.runtime.strategies.ddp import DDPRunner

        return DDPRunner(settings)
    if kind == "fsdp":
        from trainplane.runtime.strategies.fsdp import FSDPRunner

        return FSDPRunner(settings)
    if kind == "deepspeed":
        from trainplane.runtime.strategies.deepspeed import DeepSpeedRunner

        return DeepSpeedRunner(settings)
    if kind == "auto":
        raise ValueError(
            "strategy.type auto reached the runtime unresolved: it is picked at submit from "
            "the memory estimate; set strategy.type to ddp, fsdp or deepspeed"
        )
    raise ValueError(f"strategy.type {kind!r} is not one this runtime knows")


__all__ = ["StrategyRunner", "StrategySettings", "make_runner"]
