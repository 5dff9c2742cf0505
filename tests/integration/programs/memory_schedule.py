"""The memory layer under a schedule: wait records nothing, warm-up is discarded."""

import sys

import torch

import deepcontext

sched = deepcontext.schedule(wait=1, warmup=1, active=1, repeat=1)
with deepcontext.profile(sys.argv[1], context="python,op,memory", schedule=sched,
                         force=True) as prof:
    kept = torch.empty(500)  # WAIT: not recorded, and its free is not either
    prof.step()
    big = torch.empty(1 << 20, dtype=torch.uint8)  # WARMUP: discarded with the warm-up
    held = torch.empty(250)  # HELD: allocated in warm-up, live through the active step
    del big
    prof.step()
    small = torch.empty(100)  # ACTIVE
    del small, kept
    prof.step()
print("schedule done")
