"""record_function scopes whose body runs after the frame that opened them has returned (the
scope opens in __enter__): a `with` block around the forward, one opened by a helper's
contextmanager, and the optimizer's own step scope (torch.optim, foreach=False)."""

import contextlib

import torch
from torch import nn


@contextlib.contextmanager
def timed(name):
    with torch.profiler.record_function(name):  # HELPER_WITH
        yield


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
opt = torch.optim.Adam(model.parameters(), foreach=False)
x = torch.randn(8, 16)
for _ in range(3):
    with torch.profiler.record_function("fwd"):  # WITH
        y = model(x)  # BODY
        loss = y.sum()  # LOSS
    with timed("scaled"):
        z = x * 2.0  # HELPER_BODY
    loss.backward()
    opt.step()  # STEP
    opt.zero_grad()
print(f"{loss.item():.4f} {z.sum().item():.1f}")
