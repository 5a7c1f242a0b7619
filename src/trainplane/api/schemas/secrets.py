"""Bodies of ``/v1/projects/{name}/secrets`` and of the runtime's
``/v1/jobs/{id}/attempts/{aid}/secrets``."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from trainplane.services.secrets import MAX_VALUE_BYTES, SecretInfo


class SecretSet(BaseModel):
    model_config = {"extra": "forbid"}

    value: str = Field(
        min_length=1,
        max_length=MAX_VALUE_BYTES,
        description=f"The secret, at most {MAX_VALUE_BYTES} bytes; never shown again.",
    )


class SecretOut(BaseModel):
    """A secret as the API shows it: never its value."""

    key: str
    created_at: datetime
    created_by: str
    updated_at: datetime
    updated_by: str

    @classmethod
    def from_info(cls, info: SecretInfo) -> SecretOut:
        return cls.model_validate(info, from_attributes=True)


class SecretList(BaseModel):
    items: list[SecretOut]


class AttemptSecretsOut(BaseModel):
    env: dict[str, str] = Field(
        description="The attempt's entrypoint.secrets: environment variable -> value."
    )
