"""A model whose forward runs compiled by torch.compile (Inductor's C++ backend on the CPU).

Usage: compiled_mlp.py STEPS
"""

import sys

import torch


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(64, 64) / 8)

    def forward(self, x):
        y = torch.relu(x @ self.w)  # RELU_MM
        z = y * 2 + 1  # MUL_ADD
        return z.sum()  # SUM


def main() -> None:
    steps = int(sys.argv[1])
    torch.manual_seed(0)
    model = Block()
    compiled = torch.compile(model)
    x = torch.randn(32, 64)
    for _ in range(steps):
        loss = compiled(x)  # CALL
        loss.backward()  # BACKWARD
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
