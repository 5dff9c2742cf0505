"""Another CUPTI client first (torch.profiler), then deepcontext inside it; then deepcontext alone.

argv: OUT_INSIDE.dcprof OUT_AFTER.dcprof
"""

import sys

import torch
from torch.profiler import ProfilerActivity, profile

import deepcontext

x = torch.randn(256, 256, device="cuda")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    with deepcontext.profile(output=sys.argv[1]):
        for _ in range(3):
            y = x @ x  # INSIDE
        torch.cuda.synchronize()
kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
print("torch.profiler kernels", len(kernels))

with deepcontext.profile(output=sys.argv[2]):
    for _ in range(3):
        y = x @ x  # AFTER
    torch.cuda.synchronize()
print("done")
