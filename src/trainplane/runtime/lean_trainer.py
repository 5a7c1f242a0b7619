"""Ray Train's DataParallelTrainer without the processes a trainplane attempt
never needs. Imported only where Ray Train runs (runtime.ray_train).

Each actor is one more fresh Python process per attempt, importing Ray (and
Ray Train, Ray Data, pandas and pyarrow) before the next step of the start
can go on, and then waking every second for the whole run: on a small
machine that CPU comes out of the job's start and its steps
(benchmarks/README.md, Start latency).

- ``DatasetsCallback`` starts a DatasetManager actor to hand out shards of Ray
  Datasets; trainplane passes Ray Train none (its jobs read their own data).
- ``PlacementGroupCleanerCallback`` starts a detached actor that removes the
  worker group's placement group if the controller dies while its driver
  lives on. A trainplane driver does not live on: ``fit()`` raises when the
  controller dies, the driver exits, its Ray job ends, and Ray removes the
  placement groups the job created.
- The controller runs in the driver's own process instead of an actor of
  its own. Ray Train puts it in an actor so that a notebook or a Tune trial
  can drive several runs and outlive one's controller; a trainplane driver
  drives exactly one run and ends with it, so the actor only added a process
  start and ``ray.train``'s imports (about 2 s of a 7.6 s start) to every
  attempt, and the driver has imported all of it already. Fault tolerance is
  the controller's loop, unchanged: it polls the workers, restarts the
  worker group after a failure and calls trainplane's callbacks
  (runtime.restart_budget). The workers are owned by the driver now and die
  with it, as they died with the controller actor that died with the driver.

Overrides private methods of a pinned Ray minor version (pyproject.toml);
``tests/runtime/test_gpu_devices.py`` lists the actors a real run creates.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray
from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
from ray.train.v2._internal.callbacks.placement_group_callback import (
    PlacementGroupCleanerCallback,
)
from ray.train.v2._internal.execution.controller import TrainController
from ray.train.v2._internal.execution.worker_group import WorkerGroup
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

UNNEEDED = (DatasetsCallback, PlacementGroupCleanerCallback)


class DriverWorkerGroup(WorkerGroup):
    """The worker group of a controller that is not an actor: the workers'
    train context gets no handle back to the controller (it serves only
    ``ray.train.get_all_reported_checkpoints``, which trainplane's workers
    never call: checkpoints are trainplane's own)."""

    def _init_train_context_on_workers(
        self, workers: list[Any], sync_actor: Any, train_context_args: dict[str, list[Any]]
    ) -> None:
        ray.get(
            [
                worker.actor.init_train_context.remote(
                    train_run_context=self._train_run_context,
                    distributed_context=worker.distributed_context,
                    synchronization_actor=sync_actor,
                    storage_context=self._storage_context,
                    worker_callbacks=self._worker_callbacks_to_propagate,
                    controller_actor=None,
                    **{name: values[rank] for name, values in train_context_args.items()},
                )
                for rank, worker in enumerate(workers)
            ]
        )
        self._decorate_worker_log_file_paths(workers)


class DriverController(TrainController):
    worker_group_cls = DriverWorkerGroup


class LeanTrainer(DataParallelTrainer):
    def _create_default_callbacks(self) -> list[Any]:
        return [c for c in super()._create_default_callbacks() if not isinstance(c, UNNEEDED)]

    def _initialize_and_run_controller(self, **controller_init_kwargs: Any) -> Any:
        controller = DriverController(**controller_init_kwargs)
        asyncio.run(controller.run())
        return controller.get_result()
