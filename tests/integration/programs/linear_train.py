import sys

import torch

torch.manual_seed(0)
model = torch.nn.Linear(8, 4)
x = torch.randn(2, 8)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
for _ in range(steps):
    y = model(x)  # FORWARD
    loss = y.sum()  # LOSS
    loss.backward()  # BACKWARD
with torch.no_grad():
    z = torch.relu(x)  # NOGRAD
print("trained", steps, flush=True)
