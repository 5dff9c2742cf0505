"""A training loop under ``accelerate launch --cpu --num_processes 2``: Accelerator wraps the
model in DDP over gloo; every rank runs STEPS steps. Used by tests/integration/test_ranks_launchers.py."""
import torch
from accelerate import Accelerator
from torch import nn

STEPS = 3


def main():
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for _ in range(STEPS):
        loss = model(torch.randn(8, 16)).sum()  # FORWARD
        accelerator.backward(loss)  # BACKWARD
        optimizer.step()
        optimizer.zero_grad()
    print(f"rank {accelerator.process_index} of {accelerator.num_processes} done", flush=True)


if __name__ == "__main__":
    main()
