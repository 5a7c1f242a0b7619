"""A gang of Ray actors, one per rank, placed together with a placement group.

Each actor runs the job's command as a child process with torchrun's
environment and its node's folders (runtime.script_ranks), and forwards its
output line by line, tagged with the rank, to the driver's log (Ray sends
actor output to the job driver).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from trainplane.jobs.spec import load_spec
from trainplane.net import free_port
from trainplane.runtime import env as tp_env
from trainplane.runtime.devices import (
    RankPlacement,
    gpu_order,
    node_device_lists,
    own_gpu_ids,
    visible_devices_env,
)
from trainplane.runtime.gang import GangShape
from trainplane.runtime.script_ranks import RankPlan, run_rank
from trainplane.runtime.secrets import SecretsUnavailable, secret_env
from trainplane.runtime.start_timeout import placement_timeout_message

# A rank that could not get the attempt's secrets (it says why) never started.
EXIT_NO_SECRETS = 1


class PlacementTimeout(RuntimeError):
    """The cluster did not place the gang's workers in time."""


@ray.remote
class RankWorker:
    """Runs one rank's process. Ray gives a GPU actor its own GPU alone; the
    process sees its node's gang GPUs instead (runtime.devices)."""

    def node(self) -> tuple[str, str, tuple[str, ...]]:
        """This rank's node, its address, and the GPUs Ray gave this actor."""
        return (
            ray.get_runtime_context().get_node_id(),
            ray.util.get_node_ip_address(),
            own_gpu_ids(),
        )

    def free_port(self) -> int:
        return free_port("")

    def run(self, argv: list[str], extra_env: dict[str, str], rank: int, plan: RankPlan) -> int:
        try:
            # Fetched here, not sent by the driver: secrets never pass through Ray.
            # This actor's process is handed the spec as the driver was.
            document = os.environ.get(tp_env.SPEC)
            secrets = secret_env(load_spec(json.loads(document))) if document else {}
        except SecretsUnavailable as exc:
            print(f"{tp_env.TRAINING_FAILED}rank {rank}: {exc}", flush=True)
            return EXIT_NO_SECRETS
        return run_rank(argv, {**os.environ, **extra_env, **secrets}, rank=rank, plan=plan)


class WorkerGroup:
    def __init__(self, shape: GangShape, *, ready_timeout: float | None = None) -> None:
        self.shape = shape
        self.ready_timeout = ready_timeout
        self.group: PlacementGroup | None = None
        self.actors: list[Any] = []
        self._stop_lock = threading.Lock()

    def start(self) -> None:
        bundles, strategy = self.shape.bundles()
        self.group = placement_group(bundles, strategy=strategy)
        try:
            ray.get(self.group.ready(), timeout=self.ready_timeout)
        except ray.exceptions.GetTimeoutError:
            raise PlacementTimeout(
                placement_timeout_message(self.shape.workers, self.ready_timeout or 0)
            ) from None
        per_node = self.shape.workers_per_node or 1
        for rank in range(self.shape.workers):
            bundle = rank // per_node if self.shape.workers_per_node else rank
            self.actors.append(
                RankWorker.options(
                    num_cpus=self.shape.cpus_per_worker,
                    num_gpus=1 if self.shape.gpu else 0,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        self.group, placement_group_bundle_index=bundle
                    ),
                ).remote()
            )

    def run(self, argv: list[str], common_env: dict[str, str], plan: RankPlan) -> int:
        """Run ``argv`` on every rank; the first non-zero exit code ends the gang."""
        actors = list(self.actors)  # stop() may empty self.actors meanwhile
        nodes = ray.get([actor.node.remote() for actor in actors])
        node_order = list(dict.fromkeys(node_id for node_id, _, _ in nodes))
        # Ranks follow the GPUs' order on each node, as under torchrun: a
        # node's list then reads as nvidia-smi numbers it.
        order = sorted(
            range(len(nodes)),
            key=lambda r: (node_order.index(nodes[r][0]), gpu_order(nodes[r][2]), r),
        )
        actors = [actors[r] for r in order]
        nodes = [nodes[r] for r in order]
        master_addr = nodes[0][1]
        plan = replace(plan, nodes=len(node_order))
        master_port = ray.get(actors[0].free_port.remote())
        ranks_on_node = {
            node_id: [r for r, n in enumerate(nodes) if n[0] == node_id] for node_id in node_order
        }
        local_ranks = [ranks_on_node[node_id].index(r) for r, (node_id, _, _) in enumerate(nodes)]
        devices = node_device_lists(
            [
                RankPlacement(node_id, local_ranks[r], gpu_ids)
                for r, (node_id, _, gpu_ids) in enumerate(nodes)
            ]
        )
        pending = {}
        for rank, actor in enumerate(actors):
            node_id = nodes[rank][0]
            env = (
                common_env
                | tp_env.torchrun_env(
                    rank=rank,
                    local_rank=local_ranks[rank],
                    world_size=len(actors),
                    local_world_size=len(ranks_on_node[node_id]),
                    group_rank=node_order.index(node_id),
                    master_addr=master_addr,
                    master_port=master_port,
                )
                | visible_devices_env(devices[rank])
            )
            pending[actor.run.remote(argv, env, rank, plan)] = rank
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            rank = pending.pop(done[0])
            code = ray.get(done[0])
            if code != 0:
                print(
                    f"trainplane: rank {rank} exited with code {code}; stopping the others",
                    flush=True,
                )
                return code
        return 0

    def stop(self) -> None:
        """Kill the ranks and free their placement group. Safe to call twice,
        from two threads: the driver's own exit and its orphan watch."""
        with self._stop_lock:
            actors, self.actors = self.actors, []
            group, self.group = self.group, None
        for actor in actors:
            ray.kill(actor)
        if group is not None:
            remove_placement_group(group)
