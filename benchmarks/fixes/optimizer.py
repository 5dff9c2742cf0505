"""optimizer: a per-parameter update loop (launches per parameter) vs one foreach update."""

import torch
from common import time_steps, variant

torch.manual_seed(0)
params = [torch.randn(64, 64, device="cuda", requires_grad=True) for _ in range(400)]
for p in params:
    p.grad = torch.randn_like(p)
foreach = variant() == "after"


@torch.no_grad()
def step():
    if foreach:
        torch._foreach_add_(params, [p.grad for p in params], alpha=-1e-3)
    else:
        for p in params:
            p.add_(p.grad, alpha=-1e-3)  # UPDATE


time_steps(step)
