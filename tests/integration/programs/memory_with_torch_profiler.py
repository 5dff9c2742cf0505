"""A program that runs torch.profiler itself, under deepcontext's memory layer."""

import torch

before = torch.empty(1000)  # BEFORE
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                            profile_memory=True) as prof:
    inside = torch.empty(2000)  # INSIDE
after = torch.empty(3000)  # AFTER
names = {e.key for e in prof.key_averages()}
print("torch.profiler saw aten::empty:", "aten::empty" in names)
