"""optimizer: a per-parameter update loop (launches per parameter) vs one foreach update."""

import torch
from common import time_steps, variant

torch.manual_seed(0)
layers = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(150)).cuda()
params = list(layers.parameters())
x = torch.randn(16, 32, device="cuda")
foreach = variant() == "after"


def step():
    h = x
    for layer in layers:
        h = layer(h)
    h.square().mean().backward()
    with torch.no_grad():
        if foreach:
            torch._foreach_add_(params, [p.grad for p in params], alpha=-1e-3)
        else:
            for p in params:
                p.add_(p.grad, alpha=-1e-3)  # UPDATE
    for p in params:
        p.grad = None


time_steps(step)
