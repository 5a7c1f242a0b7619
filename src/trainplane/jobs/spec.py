"""The job spec as pydantic models (docs/spec.md is generated from them).

Validation is strict: unknown fields are rejected everywhere, and every rule that
involves several fields raises an error that names the field to fix. The models
are the single definition of the spec and of its defaults; the API, the CLI and
the scheduler read them, and the stored spec of a job is
``spec.model_dump(mode="json")``. Each process that is handed a stored spec
(the scheduler's launch, the attempt's driver, each rank) turns it back into
these models once, with :func:`load_spec`, and passes the typed spec on.

The sections shared by every kind live in ``trainplane.jobs.spec_sections``
and are exported from here by name.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from trainplane.jobs.durations import parse_duration
from trainplane.jobs.spec_fields import (
    Duration,
    JobName,
    ModelName,
    NonEmptyStr,
    ProjectName,
    ShortStr,
    SpecError,
    Strict,
    location,
)
from trainplane.jobs.spec_sections import (
    Checkpoint,
    DeepSpeedOptions,
    Entrypoint,
    FSDPOptions,
    KeepBest,
    ModelInfo,
    OffloadDevice,
    Priority,
    RegisterModel,
    Resources,
    Retries,
    Strategy,
    StrategyType,
    Tracking,
)
from trainplane.jobs.sweep_spec import SweepSpec

__all__ = [
    "SPEC_KINDS",
    "Checkpoint",
    "Dataset",
    "DeepSpeedOptions",
    "Entrypoint",
    "FSDPOptions",
    "FinetuneSpec",
    "Hyperparameters",
    "JobName",
    "JobSpec",
    "KeepBest",
    "Method",
    "ModelInfo",
    "ModelName",
    "OffloadDevice",
    "Optimization",
    "Priority",
    "ProjectName",
    "RegisterModel",
    "Resources",
    "Retries",
    "RunSpec",
    "SpecError",
    "Strategy",
    "StrategyType",
    "SweepSpec",
    "Tracking",
    "TrainSpec",
    "job_spec_adapter",
    "load_spec",
    "load_sweep_spec",
    "parse_spec",
    "run_spec_adapter",
]


class _JobCommon(Strict):
    name: JobName = Field(examples=["mlp-ddp"])
    project: ProjectName = Field(
        default="default",
        description="The project the job belongs to: its quotas, storage, secrets and "
        "tokens. Lowercase letters, digits, '-' and '_'; 1-63 characters.",
        examples=["vision"],
    )
    resources: Resources = Field(
        default_factory=Resources,
        description="GPUs and CPUs; on a CPU cluster each GPU is a CPU worker.",
        examples=[{"gpus": 8, "gpus_per_node": 8}],
    )
    strategy: Strategy = Field(
        default_factory=Strategy,
        description="How the model is spread over the GPUs: a mapping like `{type: ddp}`.",
        examples=[{"type": "fsdp"}],
    )
    precision: Literal["fp32", "bf16", "fp16"] | None = Field(
        default=None,
        description="Training precision. Default: bf16 on GPUs, fp32 on CPU workers.",
        examples=["bf16"],
    )
    model: ModelInfo | None = Field(
        default=None,
        description="What the memory estimate knows of the model; a fine-tune's comes "
        "from its base model's config.json.",
        examples=[{"parameters": 7.0e9}],
    )
    checkpoint: Checkpoint = Field(
        default_factory=Checkpoint,
        description="When checkpoints are saved, how many are kept, where, and what a "
        "new attempt resumes from.",
    )
    retries: Retries = Field(
        default_factory=Retries,
        description="Restarts after a failure: a mapping like `{max_restarts: 3}`.",
    )
    priority: Literal["low", "normal", "high"] = Field(
        default="normal",
        description="Order in the project's queue; `high` may preempt `low` jobs when the "
        "server allows preemption.",
    )
    max_runtime: Duration | None = Field(
        default=None,
        description="Stop and fail the job after this long (a number of seconds, or "
        "a duration like 24h or 90m).",
        examples=["24h"],
    )
    stuck_after: Duration | None = Field(
        default=None,
        description="Restart an attempt whose step has not advanced for this long "
        "(e.g. a collective hang). Default: the server's setting.",
        examples=["30m"],
    )
    tracking: Tracking = Field(
        default_factory=Tracking, description="The MLflow experiment and tags of the job's run."
    )
    register_model: RegisterModel | None = Field(
        default=None,
        description="Register the trained model in MLflow's registry when the job succeeds.",
        examples=[{"name": "support-bot", "alias": "candidate"}],
    )

    @field_validator("precision")
    @classmethod
    def _fp16_needs_loss_scaling(cls, value: str | None, info: ValidationInfo) -> str | None:
        # strategy comes before precision, so it is validated already. fp16
        # gradients underflow without a loss scaler, and FSDP2 has no sharded
        # one here yet (DDP and DeepSpeed scale the loss).
        strategy = info.data.get("strategy")
        if value == "fp16" and strategy is not None and strategy.type == "fsdp":
            raise PydanticCustomError(
                "fp16_fsdp",
                "fp16 under strategy fsdp is not supported yet (no loss scaling for sharded "
                "gradients): use bf16, or strategy ddp or deepspeed for fp16",
            )
        return value

    @property
    def priority_rank(self) -> int:
        return Priority[self.priority].value

    @property
    def max_runtime_seconds(self) -> int | None:
        return None if self.max_runtime is None else parse_duration(self.max_runtime)

    @property
    def stuck_after_seconds(self) -> int | None:
        return None if self.stuck_after is None else parse_duration(self.stuck_after)


class Optimization(Strict):
    """How a TrainContext steps the optimizer; the same under every strategy."""

    grad_accum: int = Field(
        default=1, ge=1, le=65_536, description="Micro-batches accumulated per optimizer step."
    )
    max_grad_norm: float | None = Field(
        default=None, gt=0, description="Clip the gradients' total norm to it.", examples=[1.0]
    )


class TrainSpec(_JobCommon):
    kind: Literal["train"] = Field(
        description="Runs your code: a train function, script or command."
    )
    entrypoint: Entrypoint = Field(
        description="What runs on every rank: exactly one of `function`, `script` or `command`."
    )
    optimization: Optimization = Field(
        default_factory=Optimization,
        description="How a train function's TrainContext steps the optimizer.",
    )


# --- fine-tune recipe -----------------------------------------------------------


class Dataset(Strict):
    """The fine-tune's JSON Lines files."""

    train: NonEmptyStr = Field(
        description="JSON Lines of `{text}` or `{prompt, completion}` rows: a path (relative "
        "to the spec file) or an s3:// URI.",
        examples=["data/train.jsonl"],
    )
    eval: NonEmptyStr | None = Field(
        default=None,
        description="Rows evaluated for eval_loss and perplexity, in the train file's format.",
        examples=["data/eval.jsonl"],
    )

    @field_validator("train", "eval")
    @classmethod
    def _paths(cls, value: str | None) -> str | None:
        return None if value is None else location(value)


class Method(Strict):
    """What trains: every weight, or LoRA adapters (`method: lora` is short for
    `{type: lora}`)."""

    type: Literal["full", "lora"] = Field(
        default="full", description="`full` trains every weight; `lora` trains adapters."
    )
    r: int | None = Field(
        default=None, ge=1, le=1024, description="LoRA rank. Default with lora: 8.", examples=[16]
    )
    alpha: float | None = Field(
        default=None, gt=0, description="LoRA scaling. Default with lora: 2 x r.", examples=[32]
    )
    dropout: float | None = Field(
        default=None, ge=0, lt=1, description="LoRA dropout. Default with lora: 0.05."
    )
    target_modules: list[ShortStr] | None = Field(
        default=None,
        min_length=1,
        description="Module names that get adapters. Default: every linear layer.",
        examples=[["q_proj", "v_proj"]],
    )
    merge: bool | None = Field(
        default=None,
        description="Also log the base model with the adapter merged in (lora only).",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        # `method: lora` is short for `method: {type: lora}`.
        return {"type": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _lora_fields_only_for_lora(self) -> Method:
        lora_only = [
            n
            for n in ("r", "alpha", "dropout", "target_modules", "merge")
            if getattr(self, n) is not None
        ]
        if self.type == "full" and lora_only:
            raise PydanticCustomError(
                "lora_options",
                "{fields} only apply to method type lora",
                {"fields": ", ".join(lora_only)},
            )
        if self.type == "lora":
            self.r = self.r or 8
            self.alpha = self.alpha or 2.0 * self.r
            self.dropout = 0.05 if self.dropout is None else self.dropout
            self.merge = bool(self.merge)
        return self


class Hyperparameters(Strict):
    """The fine-tune recipe's training settings."""

    learning_rate: float = Field(
        default=2e-5, gt=0, le=10, description="Peak learning rate (AdamW).", examples=[2e-4]
    )
    max_steps: int | None = Field(
        default=None, ge=1, description="Optimizer steps; set this or epochs.", examples=[1000]
    )
    epochs: float | None = Field(
        default=None,
        gt=0,
        le=1000,
        description="Passes over the train split; set this or max_steps. Default: 1.",
    )
    micro_batch_size: int = Field(default=1, ge=1, le=65_536, description="Rows per GPU per step.")
    grad_accum: int = Field(
        default=1, ge=1, le=65_536, description="Micro-batches accumulated per optimizer step."
    )
    max_seq_len: int = Field(
        default=512, ge=8, le=1_048_576, description="Tokens per row: longer rows are cut."
    )
    warmup_steps: int = Field(
        default=0, ge=0, description="Steps of linear warmup from zero to learning_rate."
    )
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        default="cosine", description="Decay after the warmup, to zero at the last step."
    )
    weight_decay: float = Field(default=0.0, ge=0, le=1, description="AdamW's weight decay.")
    max_grad_norm: float | None = Field(
        default=1.0, gt=0, description="Clip the gradients' total norm to it; none: no clipping."
    )
    eval_every_steps: int | None = Field(
        default=None, ge=1, description="Default: ten evaluations over the run."
    )
    packing: bool = Field(
        default=False, description="Concatenate rows into full max_seq_len blocks."
    )
    seed: int = Field(default=0, ge=0, description="Seeds shuffling and initialization.")

    @model_validator(mode="after")
    def _one_length(self) -> Hyperparameters:
        if self.max_steps is not None and self.epochs is not None:
            raise PydanticCustomError("training_length", "set max_steps or epochs, not both")
        if self.max_steps is None and self.epochs is None:
            self.epochs = 1.0
        return self


class FinetuneSpec(_JobCommon):
    kind: Literal["finetune"] = Field(description="Runs trainplane's fine-tune recipe.")
    base_model: NonEmptyStr = Field(
        description="A Hugging Face causal LM saved with save_pretrained: a path (relative to "
        "the spec file) or an s3:// URI.",
        examples=["s3://models/llama-3.2-1b"],
    )
    dataset: Dataset = Field(description="The train and eval JSON Lines files.")
    method: Method = Field(
        default_factory=Method, description="`full`, or `lora` with its adapter settings."
    )
    hyperparameters: Hyperparameters = Field(
        default_factory=Hyperparameters, description="The recipe's training settings."
    )

    @field_validator("base_model")
    @classmethod
    def _base_model(cls, value: str) -> str:
        return location(value)


# What the API takes: a job to run, or a sweep of them.
JobSpec = Annotated[TrainSpec | FinetuneSpec | SweepSpec, Field(discriminator="kind")]
job_spec_adapter: TypeAdapter[TrainSpec | FinetuneSpec | SweepSpec] = TypeAdapter(JobSpec)
# What an attempt runs: a sweep is never placed, its trials are.
RunSpec = Annotated[TrainSpec | FinetuneSpec, Field(discriminator="kind")]
run_spec_adapter: TypeAdapter[TrainSpec | FinetuneSpec] = TypeAdapter(RunSpec)

SPEC_KINDS = ("train", "finetune", "sweep")


def parse_spec(data: Any) -> TrainSpec | FinetuneSpec | SweepSpec:
    """Validate a decoded spec document; raises pydantic.ValidationError."""
    return job_spec_adapter.validate_python(data)


def load_spec(document: Any) -> TrainSpec | FinetuneSpec:
    """The typed spec of a stored spec document (the API's validated,
    normalized dump), at the boundary of the process it was handed to. The
    same models as the API's: whatever the server stored parses again."""
    if isinstance(document, dict) and document.get("kind") == "sweep":
        raise SpecError("the job is a sweep: it runs no attempts, its trials do")
    try:
        return run_spec_adapter.validate_python(document)
    except ValidationError as exc:
        raise SpecError(f"the job's spec does not parse: {spec_errors(exc)}") from None


def load_sweep_spec(document: Any) -> SweepSpec:
    """The typed spec of a stored sweep document; SpecError when it does not parse."""
    try:
        return SweepSpec.model_validate(document)
    except ValidationError as exc:
        raise SpecError(f"the sweep's spec does not parse: {spec_errors(exc)}") from None


def spec_errors(exc: ValidationError) -> str:
    """Each error as a sentence naming its field (``trainplane.jobs.spec_messages``)."""
    # Deferred: the messages read these models to say what a field takes.
    from trainplane.jobs.spec_messages import messages

    return messages(exc.errors())
