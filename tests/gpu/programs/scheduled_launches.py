"""A schedule's cycles on the GPU: the active steps' kernels counted exactly; CUPTI attached
through the wait steps (their launches' records ignored) and detached once the schedule is done.

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
        torch.cuda.synchronize()  # the GPU has caught up at each step's end: the detach is at once
        prof.step()
print("done")
