"""Known CUDA runtime calls on known lines, for declared hooks on the real libcudart."""

import torch

N = 1 << 20
REPS = 7

x = torch.ones(N, device="cuda")
torch.cuda.synchronize()  # SYNC
for _ in range(REPS):
    y = x * 2  # MUL
host = y.cpu()  # COPY
print("sum", int(host.sum()))
