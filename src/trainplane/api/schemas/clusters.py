"""Bodies of ``/v1/clusters``: registering a Ray cluster, and how one is shown."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

from trainplane.runtime.start_timeout import AUTOSCALING_START_TIMEOUT, FIXED_START_TIMEOUT
from trainplane.services.clusters import ClusterView

ClusterName = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?$"),
    Field(description="Lowercase letters, digits, '-' and '_'; 1-63 characters."),
]


AUTOSCALING_HELP = (
    "Whether the cluster adds nodes on demand (a KubeRay autoscaler): its attempts then wait "
    f"{AUTOSCALING_START_TIMEOUT:.0f} s by default for their workers to be placed."
)
START_TIMEOUT_HELP = (
    "Seconds an attempt waits for the cluster to place its workers before it fails; null: "
    f"{AUTOSCALING_START_TIMEOUT:.0f} if autoscaling, else {FIXED_START_TIMEOUT:.0f}."
)


class ClusterCreate(BaseModel):
    model_config = {"extra": "forbid"}

    name: ClusterName
    address: Annotated[
        str,
        StringConstraints(pattern=r"^https?://[^\s/]+(?::\d+)?/?$", max_length=1024),
        Field(description="The Ray dashboard address, e.g. http://ray-head:8265."),
    ]
    accelerator: Annotated[
        str,
        StringConstraints(pattern=r"^[A-Za-z0-9._-]{1,32}$"),
        Field(description="cpu, or the GPU type: H100, H200, A10, ..."),
    ] = "cpu"
    gpus: int = Field(ge=1, le=1_000_000, description="Total accelerators (cpu: worker slots).")
    gpus_per_node: int | None = Field(default=None, ge=1, le=64, description="Default: gpus.")
    gpu_memory_gb: float | None = Field(default=None, gt=0, le=10_000)
    price_per_gpu_hour: float = Field(default=0.0, ge=0, le=10_000)
    labels: dict[
        Annotated[str, StringConstraints(min_length=1, max_length=63)],
        Annotated[str, StringConstraints(max_length=256)],
    ] = Field(default_factory=dict, max_length=64)
    autoscaling: bool = Field(default=False, description=AUTOSCALING_HELP)
    start_timeout_seconds: int | None = Field(
        default=None, ge=1, le=86_400, description=START_TIMEOUT_HELP
    )

    @model_validator(mode="after")
    def _whole_nodes(self) -> ClusterCreate:
        if self.accelerator.lower() == "cpu":
            self.accelerator = "cpu"
        per_node = self.gpus_per_node or self.gpus
        if self.gpus % per_node:
            raise PydanticCustomError(
                "gpus_per_node",
                "gpus ({gpus}) must be a multiple of gpus_per_node ({per_node})",
                {"gpus": self.gpus, "per_node": per_node},
            )
        self.gpus_per_node = per_node
        return self


class ClusterOut(BaseModel):
    id: str
    name: str
    address: str
    accelerator: str
    gpus: int
    gpus_per_node: int
    gpu_memory_gb: float | None
    price_per_gpu_hour: float
    labels: dict[str, str]
    autoscaling: bool = Field(default=False, description=AUTOSCALING_HELP)
    start_timeout_seconds: int | None = Field(default=None, description=START_TIMEOUT_HELP)
    status: str = Field(description="READY, UNREACHABLE, or UNKNOWN until first checked.")
    status_message: str
    checked_at: datetime | None
    gpus_in_use: int
    live_attempts: int
    queued_jobs: int = Field(
        default=0, description="Queued jobs, of every project, that this cluster could run."
    )
    queued_gpus: int = Field(default=0, description="The GPUs those queued jobs ask for.")
    created_at: datetime

    @classmethod
    def from_view(cls, view: ClusterView) -> ClusterOut:
        c = view.cluster
        return cls(
            id=c.id,
            name=c.name,
            address=c.address,
            accelerator=c.accelerator,
            gpus=c.gpus,
            gpus_per_node=c.gpus_per_node,
            gpu_memory_gb=c.gpu_memory_gb,
            price_per_gpu_hour=c.price_per_gpu_hour,
            labels=c.labels,
            autoscaling=c.autoscaling,
            start_timeout_seconds=c.start_timeout_seconds,
            status=c.status,
            status_message=c.status_message,
            checked_at=c.checked_at,
            gpus_in_use=view.gpus_in_use,
            live_attempts=view.live_attempts,
            queued_jobs=view.queued_jobs,
            queued_gpus=view.queued_gpus,
            created_at=c.created_at,
        )


class ClusterList(BaseModel):
    items: list[ClusterOut]
    queued_jobs: int = Field(default=0, description="All queued jobs, of every project.")
    queued_gpus: int = Field(default=0, description="The GPUs all queued jobs ask for.")
