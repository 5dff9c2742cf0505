"""Two or more ranks over gloo (started by torchrun): DDP steps where rank 1 computes longer,
then a per-parameter all-reduce loop. Used by tests/integration/test_ranks.py."""
import time

import torch
import torch.distributed as dist
from torch import nn

DDP_STEPS, LOOP_STEPS = 3, 2


def busy(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end: pass  # STRAGGLE


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 4)))
    for _ in range(DDP_STEPS):
        loss = model(torch.randn(8, 16)).sum()
        if rank == 1:
            busy(0.3)  # EXTRA
        loss.backward()  # BACKWARD
    plain = nn.Sequential(*[nn.Linear(8, 8) for _ in range(6)])
    for _ in range(LOOP_STEPS):
        plain(torch.randn(4, 8)).sum().backward()
        for p in plain.parameters():
            dist.all_reduce(p.grad)  # PER_PARAM
    print(f"rank {rank} of {dist.get_world_size()} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
