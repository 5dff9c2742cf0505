"""A nested nn.Module model: a ModuleList of blocks, a shared activation, a module made during
forward, and a module that raises (caught), for exact module paths."""

import sys

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.fc(x))  # BLOCK


class Fails(nn.Module):
    def forward(self, x):
        x = x * 2  # FAILS
        raise ValueError("on purpose")


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(8, 1)
        self.fails = Fails()

    def forward(self, x):
        for block in self.blocks:
            x = block(x)  # BLOCKS
        try:
            self.fails(x)
        except ValueError:
            pass
        x = nn.ReLU()(x)  # MADE
        return self.head(x)  # HEAD


torch.manual_seed(0)
net = Net()
x = torch.randn(4, 8)
steps = int(sys.argv[1])
for _ in range(steps):
    loss = net(x).sum()  # FORWARD
    loss.backward()  # BACKWARD
print(f"done {steps}")
