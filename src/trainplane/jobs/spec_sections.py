"""The sections of a job spec shared by every kind (docs/spec.md lists their fields):
where the code is, resources, strategy, checkpoints, retries, tracking.

``trainplane.jobs.spec`` assembles them into the spec of each kind and
exports them by name; the defaults of their fields are the spec's only
defaults.
"""

from __future__ import annotations

import re
from enum import IntEnum
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from trainplane.code_bundles import DIGEST_PATTERN
from trainplane.jobs.environment import (
    SecretKey,
    check_not_in_env,
    env_values,
    secret_refs,
)
from trainplane.jobs.spec_fields import (
    JsonObject,
    ModelName,
    NonEmptyStr,
    ShortStr,
    StorageUri,
    Strict,
    storage_uri,
)

_FUNCTION_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# An entrypoint.args key of a script or command becomes the flag --<key>.
_FLAG_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")


class Entrypoint(Strict):
    function: str | None = Field(
        default=None,
        description="`module:function` taking a TrainContext, imported from working_dir.",
        examples=["train:train_loop"],
    )
    script: NonEmptyStr | None = Field(
        default=None,
        description="Python script run per worker: one file path, run as `python <script>`.",
        examples=["train.py"],
    )
    command: list[NonEmptyStr] | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="A command run on every rank with torchrun's variables (RANK, "
        "LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...).",
        examples=[["accelerate", "launch", "train.py"]],
    )
    args: JsonObject = Field(
        default_factory=dict,
        description="For a script or command: appended to its argv as `--key value` flags "
        "(strings and numbers as written, booleans as true/false, lists and objects as "
        "JSON, null: no flag), as argparse and HfArgumentParser read them. For a function: "
        "its arguments, as ctx.args.",
        examples=[{"steps": 300, "lr": 0.001}],
    )
    working_dir: NonEmptyStr = Field(
        default=".",
        description="The folder the code runs in, relative to the spec file; the CLI ships "
        "it as a code bundle.",
    )
    code: str | None = Field(
        default=None,
        pattern=DIGEST_PATTERN,
        description="An uploaded code bundle (POST /v1/projects/{project}/bundles) "
        "the job runs in, instead of a working_dir.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables of every rank. Configuration, not secret: "
        "viewers of the project see the names only.",
        examples=[{"HF_HUB_OFFLINE": "1"}],
    )
    secrets: dict[str, SecretKey] = Field(
        default_factory=dict,
        max_length=256,
        description="ENV_VAR: project secret key. The value is put in the job's "
        "environment at launch, and shown nowhere.",
        examples=[{"HF_TOKEN": "hf-token"}],
    )
    pip: list[NonEmptyStr] = Field(
        default_factory=list,
        max_length=256,
        description="Packages pip installs for the job on the cluster (Ray's runtime "
        "environment), as pip requirement lines.",
        examples=[["transformers==5.2.0"]],
    )

    @field_validator("function")
    @classmethod
    def _function_ref(cls, value: str | None) -> str | None:
        if value is not None and not _FUNCTION_REF.fullmatch(value):
            raise PydanticCustomError(
                "function_ref", "'{value}' must look like module.path:function", {"value": value}
            )
        return value

    @field_validator("script")
    @classmethod
    def _one_path(cls, value: str | None) -> str | None:
        if value is not None and (value.startswith("-") or any(c.isspace() for c in value)):
            raise PydanticCustomError(
                "script_path",
                "'{value}' is not one file path; put flags in entrypoint.args or use "
                "entrypoint.command",
                {"value": value},
            )
        return value

    @field_validator("args")
    @classmethod
    def _args_are_flags(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        # function, script and command come before args, so they are validated already.
        if info.data.get("script") is None and info.data.get("command") is None:
            return value  # a function's keyword arguments
        bad = [key for key in value if not _FLAG_NAME.fullmatch(key)]
        if bad:
            # One error per key, each at entrypoint.args.<key>.
            raise ValidationError.from_exception_data(
                "args",
                [
                    InitErrorDetails(
                        type=PydanticCustomError(
                            "flag_name",
                            "'{key}' cannot be a command-line flag (--{key}): use letters, "
                            "digits, _ . - and start with a letter",
                            {"key": key},
                        ),
                        loc=(key,),
                        input=key,
                    )
                    for key in bad
                ],
            )
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        return env_values(value)

    @field_validator("secrets", mode="before")
    @classmethod
    def _secret_names(cls, value: Any) -> Any:
        return secret_refs(value)

    @field_validator("secrets")
    @classmethod
    def _secrets_not_in_env(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        # env comes before secrets, so it is validated already.
        check_not_in_env(value, info.data.get("env"))
        return value

    @model_validator(mode="after")
    def _exactly_one_form(self) -> Entrypoint:
        given = [n for n in ("function", "script", "command") if getattr(self, n) is not None]
        if len(given) != 1:
            raise PydanticCustomError(
                "entrypoint_form",
                "entrypoint needs exactly one of function, script or command (got {got})",
                {"got": ", ".join(given) or "none"},
            )
        if self.code is not None and self.working_dir != ".":
            raise PydanticCustomError(
                "code_and_working_dir",
                "entrypoint.code is the job's working folder: leave working_dir out",
            )
        return self


class Resources(Strict):
    """How many GPUs and CPUs the job gets; on a CPU cluster each GPU is a CPU worker."""

    gpus: int = Field(default=1, ge=1, le=4096, description="GPUs, one worker (rank) each.")
    gpus_per_node: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Workers per node; gpus must be a multiple of it. Default: any split.",
    )
    gpu_type: ShortStr | None = Field(
        default=None,
        description="Run only on clusters whose accelerator is this (as `clusters add "
        "--accelerator` names it).",
        examples=["H100"],
    )
    cpus_per_worker: float = Field(
        default=1, gt=0, le=512, description="CPUs Ray reserves per worker."
    )

    @model_validator(mode="after")
    def _whole_nodes(self) -> Resources:
        if self.gpus_per_node is not None and self.gpus % self.gpus_per_node:
            raise PydanticCustomError(
                "gpus_per_node",
                "gpus ({gpus}) must be a multiple of gpus_per_node ({per_node})",
                {"gpus": self.gpus, "per_node": self.gpus_per_node},
            )
        return self

    @property
    def nodes(self) -> int:
        return self.gpus // (self.gpus_per_node or self.gpus)


OffloadDevice = Literal["none", "cpu", "nvme"]


class DeepSpeedOptions(Strict):
    stage: int = Field(default=2, ge=1, le=3, description="ZeRO stage 1, 2 or 3.")
    offload_optimizer: OffloadDevice = Field(
        default="none",
        description="Keep optimizer states in host memory (`cpu`); nvme is not supported yet.",
    )
    offload_param: OffloadDevice = Field(
        default="none",
        description="Keep parameters in host memory (`cpu`); needs stage 3.",
    )
    config: JsonObject = Field(
        default_factory=dict, description="Merged over the generated DeepSpeed config."
    )

    @field_validator("offload_optimizer", "offload_param")
    @classmethod
    def _no_nvme_yet(cls, value: str) -> str:
        # DeepSpeed's NVMe offload needs an nvme_path and its async_io
        # extension, which the worker image does not build: it would crash
        # at init, after the job waited for its GPUs.
        if value == "nvme":
            raise PydanticCustomError(
                "offload_nvme",
                "nvme offload is not supported yet: use cpu (host memory) or none",
            )
        return value

    @model_validator(mode="after")
    def _param_offload_needs_stage_3(self) -> DeepSpeedOptions:
        if self.offload_param != "none" and self.stage != 3:
            raise PydanticCustomError(
                "offload_param",
                "offload_param needs ZeRO stage 3 (stage is {stage})",
                {"stage": self.stage},
            )
        return self


class FSDPOptions(Strict):
    reshard_after_forward: bool = Field(
        default=True,
        description="Free the gathered parameters after forward (less memory, more traffic).",
    )
    cpu_offload: bool = Field(
        default=False, description="Keep parameters and gradients in host memory."
    )


StrategyType = Literal["ddp", "fsdp", "deepspeed", "auto"]


class Strategy(Strict):
    type: StrategyType = Field(
        default="ddp",
        description="`ddp` copies the model to every GPU; `fsdp` shards it with FSDP2; "
        "`deepspeed` uses a ZeRO stage; `auto` picks the cheapest that fits in memory.",
    )
    deepspeed: DeepSpeedOptions | None = Field(default=None, description="ZeRO's options.")
    fsdp: FSDPOptions | None = Field(default=None, description="FSDP2's options.")

    @model_validator(mode="after")
    def _options_match_type(self) -> Strategy:
        # `auto` may carry both: the options of whichever strategy it picks apply.
        if self.deepspeed is not None and self.type not in ("deepspeed", "auto"):
            raise PydanticCustomError(
                "strategy_options",
                "deepspeed options (ZeRO stage, offload) need strategy.type deepspeed, not {type}",
                {"type": self.type},
            )
        if self.fsdp is not None and self.type not in ("fsdp", "auto"):
            raise PydanticCustomError(
                "strategy_options",
                "fsdp options need strategy.type fsdp, not {type}",
                {"type": self.type},
            )
        return self


class ModelInfo(Strict):
    """What the memory estimate (and ``strategy: auto``) knows of the model.
    A fine-tune's is read from its base model's config.json; set fields here
    override it."""

    parameters: float | None = Field(
        default=None, gt=0, le=1e14, description="Parameter count.", examples=[7.0e9]
    )
    trainable_parameters: float | None = Field(
        default=None, gt=0, le=1e14, description="Default: every parameter trains."
    )
    layers: int | None = Field(
        default=None, ge=1, le=10_000, description="Transformer layers (for activations)."
    )
    hidden_size: int | None = Field(
        default=None, ge=1, le=1_000_000, description="Hidden size (for activations)."
    )
    heads: int | None = Field(
        default=None, ge=1, le=10_000, description="Attention heads (for activations)."
    )
    vocab_size: int | None = Field(
        default=None, ge=1, le=100_000_000, description="Vocabulary size (for the logits)."
    )
    sequence_length: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="Tokens per sample; omit for non-sequence models.",
    )
    micro_batch_size: int | None = Field(
        default=None, ge=1, le=1_000_000, description="Samples per GPU per forward."
    )
    activation_checkpointing: bool = Field(
        default=False, description="The model recomputes activations in backward."
    )


class KeepBest(Strict):
    metric: ShortStr = Field(description="A metric the job reports.", examples=["eval_loss"])
    mode: Literal["min", "max"] = Field(default="min", description="Whether lower is better.")


class Checkpoint(Strict):
    every_steps: int | None = Field(
        default=None, ge=1, description="Save every this many optimizer steps.", examples=[500]
    )
    every_minutes: float | None = Field(
        default=None,
        gt=0,
        le=10_080,
        description="Save when this many minutes passed since the last save (checked at "
        "each report).",
        examples=[30],
    )
    keep_last: int = Field(
        default=3, ge=1, le=1000, description="The newest checkpoints kept; older ones are pruned."
    )
    keep_best: KeepBest | None = Field(default=None, description="Keep the best by a metric.")
    storage: StorageUri | None = Field(
        default=None,
        description="s3://bucket/prefix or an absolute path, under the project's storage "
        "root. Default: the server's checkpoint storage.",
        examples=["s3://checkpoints/vision"],
    )
    resume: NonEmptyStr = Field(
        default="auto",
        description="`auto`: from the job's latest complete checkpoint; `never`: start over; "
        "or the URI of another job's checkpoint.",
    )

    @field_validator("storage")
    @classmethod
    def _storage(cls, value: str | None) -> str | None:
        return None if value is None else storage_uri(value)

    @field_validator("resume")
    @classmethod
    def _resume(cls, value: str) -> str:
        return value if value in ("auto", "never") else storage_uri(value)


class Retries(Strict):
    max_restarts: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Restarts after a failure, each from the latest checkpoint.",
        examples=[3],
    )
    backoff_seconds: float = Field(
        default=30, ge=0, le=86_400, description="Wait before the first restart; doubles each time."
    )


class Priority(IntEnum):
    """Stored as a number so queues can order by it."""

    low = 0
    normal = 50
    high = 100


class Tracking(Strict):
    experiment: ShortStr | None = Field(
        default=None,
        description="The MLflow experiment of the job's run. Default: the project's name.",
    )
    tags: dict[ShortStr, Annotated[str, StringConstraints(max_length=5000)]] = Field(
        default_factory=dict, description="Tags of the MLflow run.", examples=[{"team": "nlp"}]
    )


class RegisterModel(Strict):
    name: ModelName = Field(
        description="The registered model's name; a new version per successful job.",
        examples=["support-bot"],
    )
    alias: Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,254}$")] | None = (
        Field(
            default=None,
            description="An alias the new version gets (letters, digits, '_' and '-'; not "
            "`latest` or `vN`).",
            examples=["candidate"],
        )
    )

    @field_validator("alias")
    @classmethod
    def _not_reserved(cls, value: str | None) -> str | None:
        # MLflow keeps these for itself: models:/name@latest, and vN for versions.
        if value is not None and (value.lower() == "latest" or re.fullmatch(r"[vV]\d+", value)):
            raise PydanticCustomError(
                "alias_reserved",
                "'{value}' is reserved by MLflow; pick another alias",
                {"value": value},
            )
        return value
