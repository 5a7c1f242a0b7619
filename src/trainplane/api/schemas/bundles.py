"""Bodies of ``/v1/projects/{project}/bundles``: uploaded code bundles."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from trainplane.services.bundles import BundleView


class BundleOut(BaseModel):
    digest: str = Field(description="sha256:<hex> of the zip; name it in entrypoint.code.")
    project: str
    size_bytes: int
    files: int
    created_at: datetime

    @classmethod
    def from_view(cls, view: BundleView) -> BundleOut:
        return cls(
            digest=view.digest,
            project=view.project,
            size_bytes=view.size_bytes,
            files=view.files,
            created_at=view.created_at,
        )
