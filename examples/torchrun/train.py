"""An ordinary torchrun script: nothing trainplane-specific in it.

It reads the environment torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), joins the process group, and trains a linear
regression with DistributedDataParallel. Run it either way:

    torchrun --nproc-per-node 2 train.py
    trainplane submit examples/torchrun/job.yaml --wait
"""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)

    torch.manual_seed(0)
    true_weights = torch.randn(16, 1)
    model = DistributedDataParallel(
        torch.nn.Linear(16, 1).to(device), device_ids=[local_rank] if use_cuda else None
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1000 + rank)  # each rank its own data
    for step in range(1, 101):
        inputs = torch.randn(32, 16, generator=generator)
        targets = inputs @ true_weights
        loss = torch.nn.functional.mse_loss(model(inputs.to(device)), targets.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 25 == 0 and rank == 0:
            print(f"step {step} loss {loss.item():.5f} (world size {world_size})", flush=True)
    dist.barrier()
    if rank == 0:
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
