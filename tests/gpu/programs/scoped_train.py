"""A CUDA training step inside record_function blocks: the forward in a `with` block, a Triton
-free elementwise op issued straight from the block's body, and torch.optim's AdamW (foreach on
CUDA: multi-tensor kernels under its step scope)."""

import torch
from torch import nn

STEPS = 4
LINEARS = 2

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 8)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(64, 256, device="cuda")
for _ in range(STEPS):
    with torch.profiler.record_function("forward_block"):  # WITH
        y = model(x)  # BODY
        loss = (y * 0.5).square().mean()  # LOSS
    loss.backward()
    opt.step()  # STEP
    opt.zero_grad()
torch.cuda.synchronize()
print(f"{loss.item():.6f}")
