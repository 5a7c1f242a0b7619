"""Prints where each worker runs: the environment torchrun-style launchers set."""

import os
import socket

rank = os.environ.get("RANK", "0")
world = os.environ.get("WORLD_SIZE", "1")
master = f"{os.environ.get('MASTER_ADDR', '-')}:{os.environ.get('MASTER_PORT', '-')}"
print(f"hello from rank {rank} of {world} on {socket.gethostname()} (master {master})")
