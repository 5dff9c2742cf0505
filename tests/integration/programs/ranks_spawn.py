"""mp.spawn'ed ranks over gloo: each joins the group itself (no RANK in its environment)."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# The tensor a worker reduced last, kept to the interpreter's end (why: docs/multi-rank.md).
KEPT = []


def worker(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    t = torch.ones(4)
    for _ in range(rank + 1):
        t = t * 2  # LOCAL
    for _ in range(3):
        dist.all_reduce(t)  # REDUCE
    KEPT.append(t)
    dist.destroy_process_group()
    print(f"worker {rank} done", flush=True)


if __name__ == "__main__":
    world, port = int(sys.argv[1]), int(sys.argv[2])
    mp.spawn(worker, args=(world, port), nprocs=world)
    print("spawned", world, "done", "RANK" in os.environ, flush=True)
