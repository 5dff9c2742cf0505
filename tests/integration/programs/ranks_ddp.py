"""Two or more ranks over gloo (started by torchrun): DDP steps where rank 1 computes longer,
a per-parameter all-reduce loop, then collectives of known sizes and a large all-reduce whose
reduction keeps gloo's worker thread busy. Used by tests/integration/test_ranks*.py."""
import time

import torch
import torch.distributed as dist
from torch import nn

DDP_STEPS, LOOP_STEPS = 3, 2
SMALL, LARGE = 5, 8  # all-reduces of 1 KiB and of 64 MiB


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
    small = torch.ones(256)
    for _ in range(SMALL):
        dist.all_reduce(small)  # SMALL
    dist.broadcast(torch.zeros(100, dtype=torch.float64), src=0)  # BROADCAST
    parts = [torch.empty(64, dtype=torch.int32) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, torch.full((64,), rank, dtype=torch.int32))  # ALLGATHER
    dist.barrier()  # BARRIER
    large = torch.ones(16 << 20)
    for _ in range(LARGE):
        dist.all_reduce(large)  # LARGE
    print(f"rank {rank} of {dist.get_world_size()} done", flush=True)
    dist.destroy_process_group()
    return large  # the last collectives' tensor


if __name__ == "__main__":
    # The last collectives' tensor lives to the interpreter's end: one that dies first can be
    # freed on gloo's worker during finalization, which aborts the rank (docs/multi-rank.md).
    kept = main()
