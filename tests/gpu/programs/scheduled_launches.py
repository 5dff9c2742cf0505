"""A schedule's cycles on the GPU: the active steps' kernels counted exactly, CUPTI detached in
every paused stretch (wait steps, and all steps once the schedule is done) and attached again for
the next warm-up.

argv: OUT
"""

import sys

import torch

import deepcontext

WAIT = 2
WARMUP = 1
ACTIVE = 2
REPEAT = 3
STEPS = 20  # the schedule is done after 15; the last 5 run paused
x = torch.randn(256, 256, device="cuda")
with deepcontext.profile(sys.argv[1], schedule=deepcontext.schedule(
        wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=REPEAT)) as prof:
    for step in range(STEPS):
        for _ in range(3):
            x = torch.tanh(x)  # STEP
        torch.cuda.synchronize()  # the GPU has caught up at each step's end: a pause detaches at once
        prof.step()
print("done")
