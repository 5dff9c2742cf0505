"""deepcontext first, then torch.profiler started while it runs: neither may crash.

argv: OUT.dcprof
"""

import sys

import torch
from torch.profiler import ProfilerActivity, profile

import deepcontext

x = torch.randn(256, 256, device="cuda")
with deepcontext.profile(output=sys.argv[1]):
    for _ in range(3):
        y = x @ x  # BEFORE_TORCH
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            y = x @ x  # WITH_TORCH
        torch.cuda.synchronize()
    print("torch.profiler kernels",
          len([e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]))
    for _ in range(3):
        y = x @ x  # AFTER_TORCH
    torch.cuda.synchronize()
print("done")
