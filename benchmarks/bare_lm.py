"""The baseline: the LM of examples/lm trained by a plain PyTorch loop, with no
trainplane code on the path. Runs under torchrun (DDP when WORLD_SIZE > 1) or
as a single process, and appends one JSON line per step (step, time, loss) to
the file given with --metrics-file. Rank 0 timestamps each step as it ends and
writes the lines once training is done: per step it pays what trainplane's
``ctx.report`` pays (a clock read and a detached loss kept), no file write and
no wait for the loss's value.

    torchrun --nproc-per-node 2 benchmarks/bare_lm.py --metrics-file m.jsonl --args '{"steps": 100}'
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "lm"))
from train import DEFAULTS, TinyLM, markov_corpus


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--metrics-file", required=True)
    parser.add_argument("--args", default="{}", help="JSON, as the example's entrypoint.args")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    options = parser.parse_args()
    args = {**DEFAULTS, **json.loads(options.args)}

    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else None
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
    if cuda:
        torch.cuda.set_device(device)
    device = device or torch.device("cpu")

    torch.manual_seed(args["seed"])
    corpus = markov_corpus(args["sequences"], args["seq_len"], args["vocab"], args["seed"])
    sampler = DistributedSampler(corpus, num_replicas=world, rank=rank, seed=args["seed"])
    loader = DataLoader(
        corpus, batch_size=args["global_batch"] // world, sampler=sampler, drop_last=True
    )
    model = TinyLM(args["vocab"], args["d_model"], args["layers"], args["heads"], args["seq_len"])
    model = model.to(device)
    if world > 1:
        model = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args["lr"], weight_decay=0.01)
    steps, warmup = args["steps"], args["warmup"]
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (
            (s + 1) / warmup
            if s < warmup
            else 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, steps - warmup)))
        ),
    )
    points: list[tuple[int, float, torch.Tensor]] = []
    step, epoch = 0, 0
    while step < steps:
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            with torch.autocast(device.type, torch.bfloat16, enabled=options.precision == "bf16"):
                logits = model(inputs)
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            step += 1
            if rank == 0:
                # No synchronize on a GPU: trainplane's report does not wait
                # for the GPU either, and waiting would stop the next step's
                # launches from overlapping this one's kernels.
                points.append((step, time.time(), loss.detach()))
            if step >= steps:
                break
        epoch += 1
    if rank == 0:
        with open(options.metrics_file, "a") as out:
            for at_step, at, value in points:
                out.write(json.dumps({"step": at_step, "time": at, "loss": value.item()}) + "\n")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
