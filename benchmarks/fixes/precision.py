"""precision: fp32 matmuls on plain fp32 units vs TF32 tensor cores."""

import torch
from common import time_steps, variant

if variant() == "after":
    torch.backends.cuda.matmul.allow_tf32 = True
else:
    torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(8192, 8192, device="cuda")
b = torch.randn(8192, 8192, device="cuda")


def step():
    for _ in range(4):
        c = a @ b  # MATMUL
    return c


time_steps(step)
