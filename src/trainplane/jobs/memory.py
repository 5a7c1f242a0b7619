"""How much memory a job needs per GPU, under each strategy (pure code).

Model states follow the ZeRO paper (Rajbhandari et al., 2020): with mixed
precision and Adam, a parameter costs 2 bytes of half-precision weight, 2 of
gradient and K = 12 of optimizer state (an fp32 master copy and the two Adam
moments); in fp32 it is 4 + 4 + 8. DDP replicates all three; ZeRO stage 1
partitions the optimizer states over the N data-parallel ranks, stage 2 also
the gradients, stage 3 also the weights. FSDP2 shards everything like stage
3, but keeps fp32 weights and gradients (the strategy casts for the forward),
so its 16 bytes split 4 + 4 + 8. Offload moves the optimizer states (and with
``offload_param`` the weights) to host memory. Parameters that do not train (a
LoRA's frozen base) cost only their weights, in the precision the fine-tune
recipe loads them in (16-bit under mixed precision). DeepSpeed keeps its fp32 partition of
the weights even for an fp32 model, so its K stays 12.

On top of the model states come:

- working buffers: DDP's gradient buckets (a second copy of the gradients;
  a world of one trains without DDP),
  ZeRO's reduce bucket and the parameters stage 3 keeps gathered (up to its
  live limit), and the unsharded layers FSDP2 gathers for the forward and
  backward (two in flight, for prefetching);
- activations, when the shapes are known: for a transformer of L layers,
  hidden size h, a heads, sequence s and micro-batch b, Korthikanti et al.'s
  ``s*b*h*(34 + 5*a*s/h)`` bytes per layer in half precision (twice in fp32;
  without the ``5*a*s/h`` attention matrices under fused attention, the default),
  or only the layer inputs (``2*s*b*h`` each) plus one layer's worth with
  activation checkpointing; plus, over the vocabulary, the logits in the
  compute precision and three fp32 tensors alive together when the loss's
  backward starts (the log-probabilities the loss keeps, their gradient and
  the logits' gradient; measured on an H200, benchmarks/README.md); for a
  stack of dense layers, the inputs each layer keeps for its backward;
- initialization: what setting the model up needs beyond the steady state,
  where a path still puts the whole model on the GPU before sharding or
  casting it. FSDP2 shards on the meta device and fills the shards from
  rank 0 (``runtime.strategies.sharded_init``), and ZeRO-3 partitions each
  parameter as it is created (``zero.Init``) or moved: neither has a whole-model
  peak. DDP and ZeRO-1/2 move the model as built (fp32) to the GPU whole,
  which only shows past the steady state when little else stays there (ZeRO
  with the optimizer offloaded);
- framework overhead: on a GPU the CUDA context, the NCCL buffers of the
  training group's communicator (the only one a rank opens), and the caching
  allocator's fragmentation as a share of the rest; on a CPU worker what each
  strategy's machinery was measured to take.

Every number is bytes per GPU (per worker), so the breakdown adds up to the
total that is compared with the GPU's memory; GB are 10^9 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainplane.jobs.precision import loaded_precision

GB = 1e9  # decimal, as GPU memory is sold and as the ZeRO paper counts
# Per GPU, whatever the job: the CUDA context and the cuBLAS/cuDNN workspaces.
CUDA_CONTEXT_BYTES = 1.0 * GB
# Per GPU of a world of more than one: the buffers of NCCL's communicator for
# the training group (channels times peers times NCCL_BUFFSIZE, and the
# proxy's staging). Each rank opens that one communicator and no other.
NCCL_BUFFER_BYTES = 0.5 * GB
# The bytes per parameter of a model as user code builds it (fp32).
BUILT_BYTES = 4.0
# The caching allocator rounds and fragments: a share of what is allocated.
FRAGMENTATION = 0.10
# A CPU worker of a gang (gloo) has no CUDA context, but each strategy's
# machinery takes memory of its own: DDP's reducer and gloo's buffers,
# FSDP2's, DeepSpeed's engine. Measured here for a model of a few thousand
# parameters on two ranks (see tests/runtime/test_memory_estimates.py).
CPU_FRAMEWORK_BYTES = {"ddp": 96e6, "fsdp": 56e6, "deepspeed": 144e6}
# DeepSpeed's defaults, in elements: the gradient reduce bucket, and how many
# gathered parameters ZeRO-3 keeps live (stage3_max_live_parameters; with
# the default reuse distance a model smaller than that stays gathered).
ZERO_REDUCE_BUCKET = 5e8
ZERO_MAX_LIVE_PARAMETERS = 1e9
# Units FSDP2 gathers at once: the one computing and the next (prefetch).
UNITS_IN_FLIGHT = 2
# Without the layer count, a model is taken to shard into this many units.
ASSUMED_UNITS = 8
# Adam's states (with mixed precision, also the fp32 master weights).
OPTIMIZER_BYTES = {"mixed": 12.0, "fp32": 8.0}
BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}


@dataclass(frozen=True)
class ModelShape:
    """What is known of the model. Only ``parameters`` is required."""

    parameters: float
    trainable: float | None = None  # None: every parameter trains
    layers: int | None = None
    hidden_size: int | None = None
    heads: int | None = None
    vocab_size: int | None = None

    @property
    def trained(self) -> float:
        return self.parameters if self.trainable is None else min(self.trainable, self.parameters)

    @property
    def frozen(self) -> float:
        return self.parameters - self.trained


@dataclass(frozen=True)
class Workload:
    precision: str = "fp32"  # fp32 | bf16 | fp16
    micro_batch_size: int | None = None
    sequence_length: int | None = None  # None: not a sequence model (or unknown)
    activation_checkpointing: bool = False
    # Fused attention (PyTorch's SDPA, FlashAttention) keeps no attention
    # matrix for the backward; the eager kind keeps a*s*s per layer.
    fused_attention: bool = True
    # A LoRA fine-tune: the recipe loads the frozen base in the training
    # precision (jobs.precision.loaded_precision).
    lora: bool = False

    @property
    def mixed(self) -> bool:
        return self.precision != "fp32"


@dataclass(frozen=True)
class StrategyChoice:
    type: str  # ddp | fsdp | deepspeed
    stage: int | None = None  # ZeRO stage, for deepspeed
    offload_optimizer: bool = False
    offload_param: bool = False

    @property
    def label(self) -> str:
        if self.type == "ddp":
            return "ddp"
        if self.type == "fsdp":
            return "fsdp + cpu offload" if self.offload_optimizer else "fsdp"
        offload = []
        if self.offload_optimizer:
            offload.append("optimizer")
        if self.offload_param:
            offload.append("parameters")
        suffix = f" + {' and '.join(offload)} offload" if offload else ""
        return f"deepspeed zero-{self.stage}{suffix}"

    def spec(self) -> dict[str, object]:
        """As the spec's ``strategy`` section."""
        if self.type == "deepspeed":
            return {
                "type": "deepspeed",
                "deepspeed": {
                    "stage": self.stage,
                    "offload_optimizer": "cpu" if self.offload_optimizer else "none",
                    "offload_param": "cpu" if self.offload_param else "none",
                },
            }
        if self.type == "fsdp" and self.offload_optimizer:
            return {"type": "fsdp", "fsdp": {"cpu_offload": True}}
        return {"type": self.type}


@dataclass(frozen=True)
class MemoryEstimate:
    strategy: StrategyChoice
    world_size: int
    gpu: dict[str, float]  # bytes per GPU, by component
    host: dict[str, float] = field(default_factory=dict)  # bytes per worker offloaded
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> float:
        return sum(self.gpu.values())

    @property
    def host_total(self) -> float:
        return sum(self.host.values())

    @property
    def model_states(self) -> float:
        return sum(self.gpu.get(k, 0.0) for k in ("parameters", "gradients", "optimizer_states"))

    def fraction_of(self, gpu_memory_bytes: float | None) -> float | None:
        return self.total / gpu_memory_bytes if gpu_memory_bytes else None


def zero_model_states(
    parameters: float, world_size: int, stage: int, *, optimizer_bytes: float = 12.0
) -> float:
    """The ZeRO paper's model-state bytes per GPU: (2 + 2 + K) per parameter,
    with stage 1 splitting the K, stage 2 also the gradients' 2, stage 3 all
    of it over the ``world_size`` ranks (stage 0: plain data parallelism)."""
    psi, n, k = parameters, world_size, optimizer_bytes
    if stage == 0:
        return (2 + 2 + k) * psi
    if stage == 1:
        return 2 * psi + 2 * psi + k * psi / n
    if stage == 2:
        return 2 * psi + (2 + k) * psi / n
    if stage == 3:
        return (2 + 2 + k) * psi / n
    raise ValueError(f"ZeRO has stages 0-3, not {stage}")


def estimate(
    model: ModelShape,
    workload: Workload,
    strategy: StrategyChoice,
    world_size: int,
    *,
    on_gpu: bool = True,
) -> MemoryEstimate:
    n = max(1, world_size)
    gpu: dict[str, float] = {}
    host: dict[str, float] = {}
    notes: list[str] = []
    weights, grads, optim = _bytes_per_parameter(workload, strategy)
    trained, frozen = model.trained, model.frozen
    frozen_bytes = frozen * _frozen_bytes(workload, strategy)

    # --- model states, sharded per strategy ---------------------------------
    full_weights = trained * weights + frozen_bytes
    full_grads = trained * grads
    full_optim = trained * optim
    if strategy.type == "ddp":
        shards = (1, 1, 1)
    elif strategy.type == "fsdp":
        shards = (n, n, n)
    else:
        stage = strategy.stage or 2
        shards = {1: (1, 1, n), 2: (1, n, n), 3: (n, n, n)}[stage]
    parameters = full_weights / shards[0]
    gradients = full_grads / shards[1]
    optimizer_states = full_optim / shards[2]
    if strategy.offload_optimizer:
        host["optimizer_states"] = optimizer_states
        optimizer_states = 0.0
        if strategy.type == "deepspeed":
            # ZeRO-Offload updates on the host: the fp32 gradients go there too.
            host["gradients"] = full_grads / n * (4 / grads)
    if strategy.offload_param or (strategy.type == "fsdp" and strategy.offload_optimizer):
        host["parameters"] = parameters
        parameters = 0.0
        if strategy.type == "fsdp":
            host["gradients"] = gradients
            gradients = 0.0
    gpu["parameters"] = parameters
    gpu["gradients"] = gradients
    gpu["optimizer_states"] = optimizer_states

    # --- working buffers ---------------------------------------------------------
    units = model.layers or ASSUMED_UNITS
    unit_params = model.parameters / units
    if model.layers is None and strategy.type == "fsdp":
        notes.append(f"layer count unknown: taken as {ASSUMED_UNITS} sharded units")
    if strategy.type == "ddp":
        # Gradients are copied into the all-reduce buckets, which DDP
        # allocates as it wraps the model; a world of one trains without it.
        gpu["buffers"] = full_grads if n > 1 else 0.0
    elif strategy.type == "fsdp":
        compute = 2.0 if workload.mixed else 4.0
        # Gathered weights of the units in flight, and their full gradients
        # before the reduce-scatter (in fp32).
        gpu["buffers"] = UNITS_IN_FLIGHT * unit_params * (compute + 4.0) if n > 1 else 0.0
    else:
        stage = strategy.stage or 2
        half = 2.0 if workload.mixed else 4.0
        reduce = min(ZERO_REDUCE_BUCKET, trained) * half
        if stage == 3:
            # As for FSDP2: the gathered weights, and their full gradients
            # until they are reduced into partitions.
            gathered = min(ZERO_MAX_LIVE_PARAMETERS, model.parameters)
            gpu["buffers"] = reduce + gathered * (half + grads)
        else:
            gpu["buffers"] = reduce if n > 1 else 0.0

    # --- activations -------------------------------------------------------------
    activations, known = _activations(model, workload)
    gpu["activations"] = activations
    if not known:
        notes.append(
            "activations not counted: give model.layers and model.hidden_size "
            "(and a micro-batch size) to include them"
        )

    # --- initialization ---------------------------------------------------------
    if on_gpu:
        # On CPU workers the model is built in the same memory before any
        # strategy runs: what is measured there is the steady state.
        peak = _initialization_peak(model, workload, strategy, n)
        gpu["initialization"] = max(0.0, peak - sum(gpu.values()))
        if gpu["initialization"]:
            notes.append(
                f"{strategy.label} moves the model as built (fp32) to the GPU whole before "
                "casting or partitioning it: that peak is counted as initialization"
            )

    # --- framework -----------------------------------------------------------------
    if on_gpu:
        allocated = sum(gpu.values())
        nccl = NCCL_BUFFER_BYTES if n > 1 else 0.0
        gpu["framework"] = CUDA_CONTEXT_BYTES + nccl + FRAGMENTATION * allocated
    else:
        gpu["framework"] = CPU_FRAMEWORK_BYTES[strategy.type] if n > 1 else 0.0
    return MemoryEstimate(strategy, n, gpu, host, tuple(notes))


def _frozen_bytes(workload: Workload, strategy: StrategyChoice) -> float:
    """Bytes per parameter that does not train: a LoRA base as the recipe
    loads it, else as the strategy keeps the trained ones."""
    if workload.lora:
        return BYTES[loaded_precision(workload.precision, lora=True, strategy=strategy.type)]
    return _bytes_per_parameter(workload, strategy)[0]


def _initialization_peak(
    model: ModelShape, workload: Workload, strategy: StrategyChoice, n: int
) -> float:
    """Bytes on one GPU while the strategy sets the model up."""
    # The model as built: fp32, but a LoRA base as the recipe loads it.
    built = model.trained * BUILT_BYTES + model.frozen * (
        _frozen_bytes(workload, strategy) if workload.lora else BUILT_BYTES
    )
    if strategy.type == "fsdp":
        if strategy.offload_optimizer:
            return 0.0  # the shards are filled in host memory
        # Its shards, and the one whole unit being filled from rank 0.
        return built / n + built / (model.layers or ASSUMED_UNITS)
    if strategy.type == "deepspeed" and (strategy.stage or 2) == 3:
        if strategy.offload_param:
            return 0.0  # the partitions are made in host memory
        # Partitioned as it is built or moved: one parameter at a time whole.
        return built / n
    # DDP, ZeRO-1/2: the model as built, moved whole before it is wrapped.
    return built


def _bytes_per_parameter(
    workload: Workload, strategy: StrategyChoice
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer states) per trained parameter."""
    if strategy.type == "deepspeed":
        # ZeRO's optimizer keeps its own fp32 partition of the weights even
        # when the model itself is fp32: K is 12 either way.
        return (2.0, 2.0, OPTIMIZER_BYTES["mixed"]) if workload.mixed else (4.0, 4.0, 12.0)
    if not workload.mixed:
        return 4.0, 4.0, OPTIMIZER_BYTES["fp32"]
    # DDP under autocast and FSDP2 with a mixed-precision policy keep the
    # weights and gradients in fp32; there is no separate master copy.
    return 4.0, 4.0, OPTIMIZER_BYTES["fp32"]


def _activations(model: ModelShape, workload: Workload) -> tuple[float, bool]:
    """Bytes of activations kept for the backward, and whether they could be
    estimated at all."""
    b, s, h = workload.micro_batch_size, workload.sequence_length, model.hidden_size
    layers = model.layers
    if not (b and h and layers):
        return 0.0, False
    scale = 1.0 if workload.mixed else 2.0  # the formulas count half-precision bytes
    if s:
        heads = model.heads or max(1, h // 128)
        attention = 0.0 if workload.fused_attention else 5 * heads * s / h
        per_layer = s * b * h * (34 + attention)
        if workload.activation_checkpointing:
            kept = layers * 2 * s * b * h + per_layer
        else:
            kept = layers * per_layer
        # The loss upcasts the logits: its fp32 log-probabilities, their
        # gradient and the logits' gradient coexist as its backward starts.
        logits = s * b * (model.vocab_size or 0) * (2 * scale + 3 * 4)
        return kept * scale + logits, True
    # Dense layers: each keeps its input, its pre-activation and a norm's input.
    per_layer = 3 * b * h * 2
    kept = (layers if not workload.activation_checkpointing else 1) * per_layer
    return kept * scale, True
