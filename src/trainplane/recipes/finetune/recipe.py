"""The fine-tune train function: ``kind: finetune`` jobs run this.

It is an ordinary train function, so the job's strategy (ddp, fsdp, deepspeed),
checkpoints and resume apply to it as to any other: the data order, the LoRA
dropout and the learning rate schedule all resume exactly.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist

from trainplane.jobs.spec import FinetuneSpec, Hyperparameters
from trainplane.recipes.finetune import base_model, blocks, inputs
from trainplane.recipes.finetune.model_export import TransformersSaver
from trainplane.runtime.context import TrainContext

EVALS_PER_RUN = 10  # when eval_every_steps is not set


def lr_factor(step: int, *, warmup: int, total: int, schedule: str) -> float:
    """The learning rate multiplier after ``step`` optimizer steps: linear
    warmup, then constant, linear or cosine decay to zero at ``total``."""
    if warmup and step < warmup:
        return (step + 1) / (warmup + 1)
    if schedule == "constant" or total <= warmup:
        return 1.0
    progress = min(1.0, (step - warmup) / (total - warmup))
    if schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def total_steps(hp: Hyperparameters, batches_per_epoch: int) -> int:
    if hp.max_steps:
        return hp.max_steps
    per_epoch = max(1, batches_per_epoch // hp.grad_accum)
    # The spec sets epochs whenever max_steps is unset.
    return max(1, math.ceil(float(hp.epochs or 0) * per_epoch))


def eval_interval(hp: Hyperparameters, total: int) -> int:
    return hp.eval_every_steps or max(1, total // EVALS_PER_RUN)


def finetune_spec(ctx: TrainContext) -> FinetuneSpec:
    if not isinstance(ctx.spec, FinetuneSpec):
        raise TypeError(f"the fine-tune recipe runs kind finetune, not {ctx.spec.kind}")
    return ctx.spec


def build_model(ctx: TrainContext, folder: str) -> torch.nn.Module:
    """The base model from ``folder``, with LoRA adapters if the spec asks.
    Inside ctx.model_init: under ZeRO-3 each rank loads only its share, under
    FSDP2 only rank 0 loads the weights (the others build on the meta device)."""
    spec = finetune_spec(ctx)
    method = spec.method
    with ctx.model_init():
        model = base_model.load_base(
            folder,
            dtype=base_model.weights_dtype(
                ctx.precision, lora=method.type == "lora", strategy=spec.strategy.type
            ),
            gradient_checkpointing=spec.model is not None and spec.model.activation_checkpointing,
        )
    # Outside: the adapters are small, and ZeRO-3 would partition them
    # before peft sets their initial values. Under FSDP2 they follow the base
    # onto the meta device on ranks but 0, and prepare() gives every rank
    # rank 0's initial values.
    return base_model.with_lora(model, method)


def train(ctx: TrainContext) -> dict[str, float]:
    spec = finetune_spec(ctx)
    hp = spec.hyperparameters
    method = spec.method
    lora = method.type == "lora"
    # The same seed on every rank: LoRA's initial weights must agree.
    torch.manual_seed(hp.seed)

    folder = base_model.local_folder(spec.base_model)
    tokenizer = base_model.load_tokenizer(folder)
    model = build_model(ctx, folder)
    length = hp.max_seq_len
    packing = hp.packing
    train_set, dropped = blocks.token_blocks(
        inputs.read_dataset("dataset.train", spec.dataset.train),
        tokenizer,
        max_seq_len=length,
        packing=packing,
    )
    if dropped:
        ctx.log(f"trainplane: {dropped} training rows dropped: their prompt fills max_seq_len")
    eval_set = None
    if spec.dataset.eval:
        eval_set, _ = blocks.token_blocks(
            inputs.read_dataset("dataset.eval", spec.dataset.eval),
            tokenizer,
            max_seq_len=length,
            packing=packing,
        )
    loader = ctx.data_loader(
        train_set,
        batch_size=hp.micro_batch_size,
        seed=hp.seed,
        tokens_per_sample=length,
    )
    eval_loader = (
        ctx.data_loader(eval_set, batch_size=hp.micro_batch_size, shuffle=False, drop_last=False)
        if eval_set is not None and len(eval_set)
        else None
    )
    total = total_steps(hp, len(loader))
    ctx.total_steps = total
    every = eval_interval(hp, total)
    trainable = sum(base_model.numel(p) for p in model.parameters() if p.requires_grad)
    everything = sum(base_model.numel(p) for p in model.parameters())
    ctx.log(
        f"trainplane: fine-tuning {type(model).__name__} ({method.type}, "
        f"{trainable:,} of {everything:,} parameters train) on {len(train_set)} blocks of "
        f"{length} tokens for {total} steps"
    )
    ctx.export_with(TransformersSaver(tokenizer, lora=lora, merge=bool(method.merge)))

    def optimizer(parameters: Any) -> torch.optim.Optimizer:
        return torch.optim.AdamW(
            [p for p in parameters if p.requires_grad],
            lr=hp.learning_rate,
            weight_decay=hp.weight_decay,
        )

    def schedule(optim: torch.optim.Optimizer) -> Any:
        return torch.optim.lr_scheduler.LambdaLR(
            optim,
            lambda step: lr_factor(
                step,
                warmup=hp.warmup_steps,
                total=total,
                schedule=hp.lr_schedule,
            ),
        )

    # The base weights come from base_model again on resume: a LoRA checkpoint
    # is the adapter and its optimizer state.
    model, _ = ctx.prepare(model, optimizer, lr_scheduler=schedule, save_frozen=not lora)
    ctx.restore()

    def evaluate() -> dict[str, float]:
        if eval_loader is None:
            return {}
        return evaluation(ctx, model, eval_loader)

    if ctx.global_step == 0 and eval_loader is not None:
        ctx.report(evaluate(), step=0)  # the base model's eval loss, to compare against
    last: dict[str, float] = {}
    micro_losses: list[float] = []
    model.train()
    for batch in loader.forever():
        if ctx.global_step >= total:
            break
        batch = {k: v.to(ctx.device) for k, v in batch.items()}
        loss = model(**batch).loss
        ctx.backward(loss)
        micro_losses.append(loss.detach().float().item())
        if not ctx.step():
            continue
        metrics = {
            "loss": ctx.mean(sum(micro_losses) / len(micro_losses)),
            "learning_rate": ctx.learning_rate(),
        }
        micro_losses.clear()
        if ctx.global_step % every == 0 or ctx.global_step >= total:
            metrics.update(evaluate())
            model.train()
        ctx.report(metrics)
        last = metrics
    return last


def evaluation(ctx: TrainContext, model: Any, loader: Any) -> dict[str, float]:
    """Token-weighted mean loss over the whole eval split (every rank its
    shard), and its perplexity."""
    model.eval()
    totals = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for batch in loader:
            batch = {k: v.to(ctx.device) for k, v in batch.items()}
            loss = model(**batch).loss
            # The model shifts labels by one: these are the predicted tokens.
            counted = int((batch["labels"][:, 1:] != blocks.IGNORE).sum())
            totals += torch.tensor([loss.double().item() * counted, counted])
    if dist.is_initialized() and ctx.world_size > 1:
        device = ctx.device if ctx.device.type == "cuda" else torch.device("cpu")
        reduced = totals.to(device)
        dist.all_reduce(reduced)
        totals = reduced.cpu()
    loss_sum, count = totals.tolist()
    eval_loss = loss_sum / max(count, 1.0)
    return {"eval_loss": eval_loss, "perplexity": math.exp(min(eval_loss, 50.0))}
