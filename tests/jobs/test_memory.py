"""The memory estimator and ``strategy: auto`` (pure code): model states
against the ZeRO paper's formulas, the other components' behaviour, and the
strategy picked for models from 100M to 10T parameters."""

from __future__ import annotations

import re

import pytest

from tests.factories import example_module, finetune_spec
from trainplane.jobs.memory import (
    CPU_FRAMEWORK_BYTES,
    CUDA_CONTEXT_BYTES,
    GB,
    NCCL_BUFFER_BYTES,
    ModelShape,
    StrategyChoice,
    Workload,
    estimate,
    zero_model_states,
)
from trainplane.jobs.spec import parse_spec
from trainplane.jobs.strategy_choice import HEADROOM, choose_strategy
from trainplane.services.estimates import workload_of

MIXED = Workload(precision="bf16")
H100 = 80 * GB


def zero(stage):
    return StrategyChoice("deepspeed", stage=stage)


# --- the ZeRO paper -------------------------------------------------------------------


@pytest.mark.parametrize("psi", [7e9, 70e9])
@pytest.mark.parametrize("n", [8, 64])
def test_deepspeed_model_states_are_the_zero_papers_formulas(psi, n):
    """(2 + 2 + K) bytes per parameter, K = 12 for mixed-precision Adam:
    stage 1 divides K by N, stage 2 also the gradients' 2, stage 3 all."""
    expected = {
        1: 4 * psi + 12 * psi / n,
        2: 2 * psi + 14 * psi / n,
        3: 16 * psi / n,
    }
    for stage, bytes_ in expected.items():
        assert zero_model_states(psi, n, stage) == bytes_
        got = estimate(ModelShape(psi), MIXED, zero(stage), n)
        assert got.model_states == bytes_, stage
    # Plain data parallelism is the paper's baseline, 16 bytes per parameter.
    assert zero_model_states(psi, n, 0) == 16 * psi
    assert estimate(ModelShape(psi), MIXED, StrategyChoice("ddp"), n).model_states == 16 * psi


def test_the_papers_own_example():
    """7.5B parameters on 64 GPUs: 120 GB, 31.4 GB, 16.6 GB and 1.88 GB."""
    psi = 7.5e9
    assert zero_model_states(psi, 64, 0) / GB == pytest.approx(120)
    assert zero_model_states(psi, 64, 1) / GB == pytest.approx(31.4, abs=0.05)
    assert zero_model_states(psi, 64, 2) / GB == pytest.approx(16.6, abs=0.05)
    assert zero_model_states(psi, 64, 3) / GB == pytest.approx(1.875)


def test_fsdp_shards_all_sixteen_bytes_but_keeps_fp32_weights():
    got = estimate(ModelShape(7e9), MIXED, StrategyChoice("fsdp"), 8)
    assert got.gpu["parameters"] == 4 * 7e9 / 8
    assert got.gpu["gradients"] == 4 * 7e9 / 8
    assert got.gpu["optimizer_states"] == 8 * 7e9 / 8
    assert got.model_states == zero_model_states(7e9, 8, 3)


def test_fp32_costs_sixteen_bytes_a_parameter_and_deepspeed_adds_its_master_copy():
    ddp = estimate(ModelShape(1e9), Workload("fp32"), StrategyChoice("ddp"), 4)
    assert (ddp.gpu["parameters"], ddp.gpu["gradients"], ddp.gpu["optimizer_states"]) == (
        4e9,
        4e9,
        8e9,
    )
    stage1 = estimate(ModelShape(1e9), Workload("fp32"), zero(1), 4)
    assert stage1.gpu["parameters"] == 4e9 and stage1.gpu["gradients"] == 4e9
    assert stage1.gpu["optimizer_states"] == 12e9 / 4  # fp32 partition + Adam's two


# --- the other components -------------------------------------------------------------


def test_offload_moves_optimizer_states_and_parameters_to_the_host():
    shape = ModelShape(7e9)
    plain = estimate(shape, MIXED, zero(3), 8)
    offloaded = estimate(
        shape, MIXED, StrategyChoice("deepspeed", 3, offload_optimizer=True, offload_param=True), 8
    )
    assert offloaded.gpu["optimizer_states"] == 0 and offloaded.gpu["parameters"] == 0
    assert offloaded.host["optimizer_states"] == plain.gpu["optimizer_states"]
    assert offloaded.host["parameters"] == plain.gpu["parameters"]
    assert offloaded.total < plain.total


def test_frozen_parameters_cost_only_their_weights():
    full = estimate(ModelShape(7e9), MIXED, StrategyChoice("ddp"), 1)
    lora = estimate(ModelShape(7e9, trainable=2e7), MIXED, StrategyChoice("ddp"), 1)
    assert lora.gpu["parameters"] == 4 * 7e9  # every weight, fp32 under autocast
    assert lora.gpu["gradients"] == 4 * 2e7
    assert lora.gpu["optimizer_states"] == 8 * 2e7
    assert lora.total < full.total / 3


LORA_MIXED = Workload(precision="bf16", lora=True)


@pytest.mark.parametrize(
    ("workload", "strategy", "frozen_bytes"),
    [
        (LORA_MIXED, StrategyChoice("ddp"), 2.0),  # the recipe loads the base in bf16
        (LORA_MIXED, StrategyChoice("fsdp"), 2.0),
        (LORA_MIXED, zero(2), 2.0),
        (Workload("fp16", lora=True), StrategyChoice("ddp"), 2.0),
        (Workload("fp32", lora=True), StrategyChoice("ddp"), 4.0),
        (Workload("fp32", lora=True), zero(2), 4.0),
    ],
    ids=lambda v: getattr(v, "label", None) or getattr(v, "precision", None) or str(v),
)
def test_a_lora_base_costs_the_bytes_of_the_dtype_the_recipe_loads_it_in(
    workload, strategy, frozen_bytes
):
    shape = ModelShape(7e9, trainable=2e7, layers=32)
    got = estimate(shape, workload, strategy, 1)
    # A world of one: nothing is sharded. The adapters are fp32 (2 bytes
    # under ZeRO's 16-bit module).
    adapter_bytes = 2.0 if strategy.type == "deepspeed" and workload.mixed else 4.0
    expected = (7e9 - 2e7) * frozen_bytes + 2e7 * adapter_bytes
    assert got.gpu["parameters"] == pytest.approx(expected)
    if strategy.type != "fsdp":  # (FSDP2 adds the unit it is filling)
        # Moved to the GPU as loaded: no peak past the steady state.
        assert got.gpu.get("initialization", 0.0) == 0.0


def test_a_lora_fine_tune_spec_is_estimated_with_its_base_in_16_bit():
    lora = parse_spec(finetune_spec(precision="bf16", strategy={"type": "ddp"}))
    full = parse_spec(
        finetune_spec(precision="bf16", strategy={"type": "ddp"}, method={"type": "full"})
    )
    assert workload_of(lora).lora and not workload_of(full).lora
    shape = ModelShape(7e9, trainable=2e7)
    frozen = 7e9 - 2e7
    lora_estimate = estimate(shape, workload_of(lora), StrategyChoice("ddp"), 1)
    train_function = estimate(shape, Workload("bf16"), StrategyChoice("ddp"), 1)
    # A train function's own frozen weights stay as it built them (fp32).
    assert train_function.gpu["parameters"] - lora_estimate.gpu["parameters"] == 2 * frozen


def test_transformer_activations_follow_the_batch_and_shrink_with_checkpointing():
    shape = ModelShape(7e9, layers=32, hidden_size=4096, heads=32, vocab_size=32000)
    eager = Workload("bf16", 1, 4096, fused_attention=False)
    one = estimate(shape, eager, StrategyChoice("fsdp"), 8)
    two = estimate(
        shape, Workload("bf16", 2, 4096, fused_attention=False), StrategyChoice("fsdp"), 8
    )
    fused = estimate(shape, Workload("bf16", 1, 4096), StrategyChoice("fsdp"), 8)
    saved = estimate(shape, Workload("bf16", 1, 4096, True), StrategyChoice("fsdp"), 8)
    # s*b*h*(34 + 5*a*s/h) per layer, plus the logits (bf16) and three fp32
    # tensors over the vocabulary at the loss's backward; fused attention
    # keeps no attention matrices.
    per_layer = 4096 * 1 * 4096 * (34 + 5 * 32 * 4096 / 4096)
    logits = 4096 * 32000 * (2 + 3 * 4)
    assert one.gpu["activations"] == pytest.approx(32 * per_layer + logits)
    assert fused.gpu["activations"] == pytest.approx(32 * 4096 * 4096 * 34 + logits)
    assert two.gpu["activations"] == pytest.approx(2 * one.gpu["activations"])
    assert saved.gpu["activations"] < fused.gpu["activations"] / 5  # the logits stay
    assert not one.notes


def test_unknown_shapes_say_what_was_left_out():
    got = estimate(ModelShape(7e9), MIXED, StrategyChoice("fsdp"), 8)
    assert got.gpu["activations"] == 0
    assert any("activations not counted" in n for n in got.notes)
    assert any("layer count unknown" in n for n in got.notes)


def test_a_gpu_carries_the_cuda_context_nccl_and_fragmentation_a_cpu_worker_its_strategys_share():
    gpu = estimate(ModelShape(1e8), MIXED, StrategyChoice("ddp"), 8)
    cpu = estimate(ModelShape(1e8), MIXED, StrategyChoice("ddp"), 8, on_gpu=False)
    allocated = cpu.total - cpu.gpu["framework"]
    expected = CUDA_CONTEXT_BYTES + NCCL_BUFFER_BYTES + 0.1 * allocated
    assert gpu.gpu["framework"] == pytest.approx(expected)
    assert cpu.gpu["framework"] == CPU_FRAMEWORK_BYTES["ddp"]
    assert gpu.total == pytest.approx(sum(gpu.gpu.values()))


def test_ddp_buckets_copy_the_gradients_only_in_a_world_of_more_than_one():
    # A world of one trains without DDP (runtime/strategies/ddp.py).
    one = estimate(ModelShape(1e8), MIXED, StrategyChoice("ddp"), 1)
    two = estimate(ModelShape(1e8), MIXED, StrategyChoice("ddp"), 2)
    assert one.gpu["buffers"] == 0.0
    assert two.gpu["buffers"] == two.gpu["gradients"] == 4e8


# Peaks of allocated memory an H200 measured for the LM example in bf16, one
# GPU (benchmarks/README.md: the GPU suite's rows, and gpu_memory_check.py's):
# (d_model, layers, vocab, seq_len, micro-batch, heads) -> {strategy: GB}.
H200_PEAKS = {
    (1024, 16, 32768, 1024, 16, 16): {
        "ddp": 21.1, "fsdp": 19.5, "zero1": 20.0, "zero2": 20.0, "zero3": 21.6,
    },
    (2048, 16, 32768, 2048, 8, 16): {"ddp": 40.21, "fsdp": 36.25, "zero3": 41.03},
}  # fmt: skip
LABELS = {"ddp": StrategyChoice("ddp"), "fsdp": StrategyChoice("fsdp")}
LABELS |= {f"zero{n}": zero(n) for n in (1, 2, 3)}


@pytest.mark.parametrize(
    ("dims", "label"), [(dims, label) for dims, peaks in H200_PEAKS.items() for label in peaks]
)
def test_the_estimate_covers_what_a_gpu_measured_without_wasting_it(dims, label):
    d_model, layers, vocab, seq_len, batch, heads = dims
    lm = {"d_model": d_model, "layers": layers, "vocab": vocab, "seq_len": seq_len}
    shape = ModelShape(
        example_module("lm").parameter_count(lm),
        layers=layers,
        hidden_size=d_model,
        heads=heads,
        vocab_size=vocab,
    )
    got = estimate(shape, Workload("bf16", batch, seq_len), LABELS[label], 1)
    allocated = (got.total - got.gpu["framework"]) / 1e9  # what the allocator counts
    measured = H200_PEAKS[dims][label]
    # Within 1% below (run-to-run noise of the peak) to 15% above.
    assert 0.99 * measured <= allocated <= 1.15 * measured, (allocated, measured)


def test_a_world_of_one_opens_no_nccl_communicator():
    one = estimate(ModelShape(1e8), MIXED, StrategyChoice("ddp"), 1)
    allocated = one.total - one.gpu["framework"]
    assert one.gpu["framework"] == pytest.approx(CUDA_CONTEXT_BYTES + 0.1 * allocated)


@pytest.mark.parametrize(
    "strategy",
    [
        StrategyChoice("ddp"),
        StrategyChoice("fsdp"),
        StrategyChoice("fsdp", offload_optimizer=True),
        zero(1),
        zero(3),
        StrategyChoice("deepspeed", stage=3, offload_optimizer=True, offload_param=True),
    ],
    ids=lambda c: c.label,
)
def test_sharded_initialization_has_no_whole_model_peak(strategy):
    # FSDP2 fills meta-device shards from rank 0; ZeRO-3 partitions as it
    # builds (zero.Init); DDP and ZeRO-1 keep more than the fp32 model anyway.
    got = estimate(ModelShape(70e9, layers=80), MIXED, strategy, 8)
    assert got.gpu["initialization"] == 0.0
    assert not any("initialization" in note for note in got.notes)


@pytest.mark.parametrize(
    "choice",
    [zero(2), StrategyChoice("deepspeed", stage=2, offload_optimizer=True)],
    ids=lambda c: c.label,
)
def test_zero_2_counts_the_fp32_model_moved_to_the_gpu_whole(choice):
    # Its steady state keeps 2 bytes of weights per parameter on the GPU and
    # shards of the rest, but the model built in fp32 arrives whole first.
    got = estimate(ModelShape(7e9), MIXED, choice, 8)
    steady = sum(v for k, v in got.gpu.items() if k not in ("initialization", "framework"))
    assert got.gpu["initialization"] == pytest.approx(4 * 7e9 - steady)
    assert got.gpu["initialization"] > 0
    assert any("to the GPU whole" in note for note in got.notes)
    assert got.total == pytest.approx(sum(got.gpu.values()))
    cpu = estimate(ModelShape(7e9), MIXED, choice, 8, on_gpu=False)
    assert "initialization" not in cpu.gpu  # built in that same memory


def test_auto_never_picks_fsdp_for_fp16():
    shape = ModelShape(7e9, layers=32, hidden_size=4096)
    bf16 = choose_strategy(shape, Workload("bf16"), 8, H100)
    fp16 = choose_strategy(shape, Workload("fp16"), 8, H100)
    assert bf16.chosen is not None and bf16.chosen.strategy.type == "fsdp"
    assert fp16.chosen is not None and fp16.chosen.strategy.type == "deepspeed"
    assert "fsdp" not in {e.strategy.type for e in fp16.candidates}


def test_more_sharding_never_needs_more_memory():
    shape = ModelShape(13e9, layers=40, hidden_size=5120, heads=40, vocab_size=32000)
    work = Workload("bf16", 1, 2048)
    order = [StrategyChoice("ddp"), zero(1), zero(2), zero(3)]
    totals = [estimate(shape, work, s, 8).total for s in order]
    assert totals == sorted(totals, reverse=True)


# --- strategy: auto -----------------------------------------------------------------------


def test_auto_picks_ddp_for_a_100m_model_on_eight_80gb_gpus():
    choice = choose_strategy(ModelShape(1e8), MIXED, 8, H100)
    assert choice.chosen is not None and choice.chosen.strategy.label == "ddp"
    assert choice.reason.startswith("picked ddp: ")


def test_auto_shards_a_13b_full_fine_tune_on_eight_80gb_gpus():
    shape = ModelShape(13e9, layers=40, hidden_size=5120, heads=40, vocab_size=32000)
    choice = choose_strategy(shape, Workload("bf16", 1, 2048), 8, H100)
    assert choice.chosen is not None
    assert choice.chosen.strategy.type in ("fsdp", "deepspeed")
    assert choice.chosen.strategy.label == "fsdp"  # the cheapest that fits
    assert choice.chosen.total <= HEADROOM * H100
    assert re.match(
        r"ddp needs [\d.]+ GB \(over 72.0 GB, 90% of 80.0 GB\); picked fsdp", choice.reason
    )


def test_auto_offloads_when_only_offload_fits():
    choice = choose_strategy(ModelShape(70e9, layers=80), MIXED, 8, H100)
    assert choice.chosen is not None
    assert choice.chosen.strategy.label == "deepspeed zero-3 + optimizer and parameters offload"
    assert [e.strategy.label for e in choice.candidates][:3] == [
        "ddp",
        "fsdp",
        "deepspeed zero-3",
    ]


def test_auto_finds_nothing_for_ten_trillion_parameters_and_says_by_how_much():
    choice = choose_strategy(ModelShape(1e13), MIXED, 8, H100)
    assert choice.chosen is None
    assert choice.reason.startswith("no strategy fits 80.0 GB GPUs: even deepspeed zero-3 +")


def test_auto_without_known_gpu_memory_takes_ddp_and_says_why():
    choice = choose_strategy(ModelShape(7e9), MIXED, 8, None)
    assert choice.chosen is not None and choice.chosen.strategy.label == "ddp"
    assert "reports its GPU memory" in choice.reason


def test_chosen_strategies_become_spec_sections():
    assert StrategyChoice("ddp").spec() == {"type": "ddp"}
    assert StrategyChoice("deepspeed", 3, True, True).spec() == {
        "type": "deepspeed",
        "deepspeed": {"stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu"},
    }
