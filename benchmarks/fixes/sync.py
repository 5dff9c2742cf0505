"""sync: reading the loss with .item() every step (a host-device sync) vs accumulating on device."""

import torch
from common import time_steps, variant

torch.manual_seed(0)
layers = [torch.nn.Linear(256, 256).cuda() for _ in range(12)]
params = [p for layer in layers for p in layer.parameters()]
opt = torch.optim.SGD(params, lr=1e-3)
x = torch.randn(64, 256, device="cuda")
on_device = variant() == "after"
total = torch.zeros((), device="cuda")


def step():
    global total
    for _ in range(10):
        h = x
        for layer in layers:
            h = torch.relu(layer(h))
        loss = h.square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if on_device:
            total += loss.detach()
        else:
            total += loss.item()  # SYNC


time_steps(step)
