"""memcpy: an input batch copied to the GPU every step from pageable host memory (the driver
stages it through its own pinned buffer, synchronously) vs from pinned memory, asynchronously:
what DataLoader(pin_memory=True) and `.to('cuda', non_blocking=True)` give."""

import torch
from common import time_steps, variant

torch.manual_seed(0)
pinned = variant() == "after"
# four 64x3x224x224 fp32 batches (38.5 MB each), as a data loader would hand them over
batches = [torch.randn(64, 3, 224, 224) for _ in range(4)]
if pinned:
    batches = [b.pin_memory() for b in batches]
stem = torch.nn.Conv2d(3, 32, 7, stride=4).cuda()
i = 0


def step():
    global i
    x = batches[i % len(batches)].to("cuda", non_blocking=pinned)  # COPY
    i += 1
    return stem(x).relu().mean()


# 100 steps, not 20: the batches' set-up (randn, 154M values) is most of a 20-step run, and how
# much of it the copies are (a pinned copy saves half) swung around the warning line with the
# host's pageable bandwidth (10-20 GB/s on the H100 machine)
time_steps(step, steps=100)
