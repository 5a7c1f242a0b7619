"""Project quotas (pure code): GPUs in use at once, and GPU-hours per
calendar month. A job beyond them waits with the reason in words; a job
that can never fit its project's GPU limit is refused at submit."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ProjectQuota:
    project_id: str
    name: str
    max_gpus: int | None
    gpu_hours_per_month: float | None
    gpus_in_use: int = 0
    gpu_hours_this_month: float = 0.0

    def blocks(self, gpus: int, extra_in_use: int = 0) -> str | None:
        """Why starting a job of ``gpus`` now would break the quota, if it would."""
        budget = self.gpu_hours_per_month
        if budget is not None and self.gpu_hours_this_month >= budget:
            return (
                f"quota: project {self.name} used {self.gpu_hours_this_month:.1f} of its "
                f"{budget:g} GPU-hours this month"
            )
        in_use = self.gpus_in_use + extra_in_use
        if self.max_gpus is not None and in_use + gpus > self.max_gpus:
            return f"quota: project {self.name} uses {in_use} of {self.max_gpus} GPUs"
        return None


@dataclass
class QuotaLedger:
    """The quotas during one placement pass: GPUs placed in the pass count
    against their project right away."""

    quotas: dict[str, ProjectQuota]
    placed: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, quotas: Iterable[ProjectQuota]) -> QuotaLedger:
        return cls({q.project_id: q for q in quotas})

    def blocks(self, project_id: str | None, gpus: int) -> str | None:
        quota = self.quotas.get(project_id) if project_id else None
        if quota is None:
            return None
        return quota.blocks(gpus, self.placed.get(project_id, 0))

    def take(self, project_id: str | None, gpus: int) -> None:
        if project_id in self.quotas:
            self.placed[project_id] = self.placed.get(project_id, 0) + gpus
