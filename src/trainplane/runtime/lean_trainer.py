"""Ray Train's DataParallelTrainer without the two actors a trainplane attempt
never needs. Imported only where Ray Train runs (runtime.ray_train).

Each actor is one more fresh Python process per attempt, importing Ray (and
Ray Data, pandas and pyarrow) while the worker group starts, and then waking
every second for the whole run: on a small machine that CPU comes out of the
job's start and its steps (benchmarks/README.md, Start latency).

- ``DatasetsCallback`` starts a DatasetManager actor to hand out shards of Ray
  Datasets; trainplane passes Ray Train none (its jobs read their own data).
- ``PlacementGroupCleanerCallback`` starts a detached actor that removes the
  worker group's placement group if the controller dies while its driver
  lives on. A trainplane driver does not live on: ``fit()`` raises when the
  controller dies, the driver exits, its Ray job ends, and Ray removes the
  placement groups the job created.

Overrides a private method of a pinned Ray minor version (pyproject.toml);
``tests/runtime/test_gpu_devices.py`` lists the actors a real run creates.
"""

from __future__ import annotations

from typing import Any

from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
from ray.train.v2._internal.callbacks.placement_group_callback import (
    PlacementGroupCleanerCallback,
)
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

UNNEEDED = (DatasetsCallback, PlacementGroupCleanerCallback)


class LeanTrainer(DataParallelTrainer):
    def _create_default_callbacks(self) -> list[Any]:
        return [c for c in super()._create_default_callbacks() if not isinstance(c, UNNEEDED)]
