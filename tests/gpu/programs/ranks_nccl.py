"""A two-rank NCCL job (torchrun): DDP steps, all-reduces of a known size, then FSDP steps,
each rank on its own GPU.
Used by tests/gpu/test_ranks_gpu.py."""
import os

import torch
import torch.distributed as dist
from torch import nn

STEPS = 4


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(0)
    ddp = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024)).cuda())
    for _ in range(STEPS):
        ddp(torch.randn(64, 1024, device="cuda")).sum().backward()  # DDP_STEP
    known = torch.ones(1 << 20, device="cuda")
    for _ in range(STEPS):
        dist.all_reduce(known)  # KNOWN
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    fsdp = FSDP(nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024)).cuda())
    for _ in range(STEPS):
        fsdp(torch.randn(64, 1024, device="cuda")).sum().backward()  # FSDP_STEP
    torch.cuda.synchronize()
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
