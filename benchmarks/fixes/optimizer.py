"""optimizer: a model made of many small parameter tensors (per-block scales and biases, 400 in
all, applied batched), trained with a hand-written per-parameter update loop vs torch.optim's
fused SGD: one update kernel for all parameters."""

import torch
from common import time_steps, variant

torch.manual_seed(0)
scales = [torch.ones(256, device="cuda", requires_grad=True) for _ in range(200)]
biases = [torch.zeros(256, device="cuda", requires_grad=True) for _ in range(200)]
params = scales + biases
x = torch.randn(200, 64, 256, device="cuda")
opt = torch.optim.SGD(params, lr=1e-3, fused=True) if variant() == "after" else None


def step():
    h = x * torch.stack(scales)[:, None] + torch.stack(biases)[:, None]
    h.square().mean().backward()
    if opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=True)
        return
    with torch.no_grad():
        for p in params:
            p.add_(p.grad, alpha=-1e-3)  # UPDATE
    for p in params:
        p.grad = None


time_steps(step)
