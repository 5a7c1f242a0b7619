"""Response bodies of ``GET /v1/usage``."""

from __future__ import annotations

from datetime import date, datetime

from pydantic import BaseModel, Field

from trainplane.services.usage import JobLine, UsageLine, UsageReport


class UsageTotals(BaseModel):
    gpu_hours: float
    cost: float
    jobs: int = Field(description="Jobs that ran in the window.")
    lost_gpu_hours: float = Field(
        description="Of gpu_hours, those of attempts a restart replaced (failures, lost "
        "clusters, preemptions)."
    )

    @classmethod
    def of(cls, line: UsageLine) -> UsageTotals:
        return cls(
            gpu_hours=round(line.gpu_hours, 6),
            cost=round(line.cost, 6),
            jobs=line.jobs,
            lost_gpu_hours=round(line.lost_gpu_hours, 6),
        )


class ProjectUsage(UsageTotals):
    project: str


class ExperimentUsage(UsageTotals):
    project: str
    experiment: str


class JobUsageOut(UsageTotals):
    id: str
    name: str
    project: str
    experiment: str


class DayUsage(BaseModel):
    day: date
    gpu_hours: dict[str, float] = Field(description="Project -> GPU-hours on that UTC day.")


class UsageOut(BaseModel):
    since: datetime
    until: datetime
    total: UsageTotals
    by_project: list[ProjectUsage]
    by_experiment: list[ExperimentUsage]
    by_job: list[JobUsageOut] = Field(description="The jobs with the most GPU-hours, first.")
    by_day: list[DayUsage] = Field(description="Every UTC day of the window, oldest first.")

    @classmethod
    def from_report(cls, report: UsageReport) -> UsageOut:
        return cls(
            since=report.since,
            until=report.until,
            total=UsageTotals.of(report.total),
            by_project=[
                ProjectUsage(project=name, **UsageTotals.of(line).model_dump())
                for name, line in report.by_project.items()
            ],
            by_experiment=[
                ExperimentUsage(
                    project=project, experiment=experiment, **UsageTotals.of(line).model_dump()
                )
                for (project, experiment), line in report.by_experiment.items()
            ],
            by_job=[_job(line) for line in report.top_jobs],
            by_day=[
                DayUsage(day=day, gpu_hours={p: round(h, 6) for p, h in hours.items()})
                for day, hours in report.by_day.items()
            ],
        )


def _job(line: JobLine) -> JobUsageOut:
    return JobUsageOut(
        id=line.id,
        name=line.name,
        project=line.project,
        experiment=line.experiment,
        **UsageTotals.of(line.usage).model_dump(),
    )
