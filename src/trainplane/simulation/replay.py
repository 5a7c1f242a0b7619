"""A replay of a trace under one named policy: the engine
(:mod:`trainplane.simulation.engine`) run with a policy from
:data:`trainplane.simulation.policies.POLICIES`."""

from __future__ import annotations

from collections.abc import Sequence

from trainplane.simulation.engine import SimJob, simulate
from trainplane.simulation.policies import POLICIES
from trainplane.simulation.trace import TraceJob


def replay(
    jobs: Sequence[TraceJob],
    *,
    policy: str,
    gpus: int,
    gpus_per_node: int,
    estimate_factor: float = 2.0,
    checkpoint_minutes: float = 30.0,
    restart_overhead_seconds: float = 60.0,
) -> list[SimJob]:
    """Every finished job under ``policy``; jobs larger than the cluster are left out."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {tuple(POLICIES)}")
    return simulate(
        jobs,
        POLICIES[policy](),
        gpus=gpus,
        gpus_per_node=gpus_per_node,
        estimate_factor=estimate_factor,
        checkpoint_minutes=checkpoint_minutes,
        restart_overhead_seconds=restart_overhead_seconds,
    )
