"""Dynamo-level behaviour without Inductor's build cost (backend="eager"): a function that
recompiles for every new input length, and a model whose forward breaks the graph.

Usage: compile_churn.py LENGTHS BREAK_STEPS
"""

import sys

import torch


def scale(x, factor):
    return x * factor + 1


class Broken(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(256, 256)

    def forward(self, x):
        h = torch.relu(self.lin(x))
        print("", end="")  # GRAPH_BREAK
        return torch.tanh(self.lin(h)).sum()


def main() -> None:
    lengths, steps = int(sys.argv[1]), int(sys.argv[2])
    compiled = torch.compile(scale, backend="eager", dynamic=False)
    for n in range(1, lengths + 1):
        compiled(torch.ones(n), 2.0)  # CHURN
    model = torch.compile(Broken(), backend="eager")
    x = torch.randn(512, 256)
    total = 0.0
    for _ in range(steps):
        total += float(model(x))  # BROKEN_CALL
    print(f"done {lengths} {steps}")


if __name__ == "__main__":
    main()
