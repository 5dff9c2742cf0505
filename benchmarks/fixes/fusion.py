"""kernel_fusion: a hand-written tanh-GELU (many elementwise kernels) vs the fused API."""

import torch
import torch.nn.functional as F
from common import time_steps, variant

x = torch.randn(8192, 8192, device="cuda", requires_grad=True)
fused = variant() == "after"


def gelu(t):
    if fused:
        return F.gelu(t, approximate="tanh")
    return 0.5 * t * (1.0 + torch.tanh(0.79788456 * (t + 0.044715 * t * t * t)))  # GELU


def step():
    y = gelu(x)
    y.sum().backward()


time_steps(step)
