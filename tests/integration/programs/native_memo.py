"""Repeated operators from lines that share one native stack (the memoized native placement must
keep them apart): exact counts per line."""
import torch

x = torch.ones(4)


def f(n):
    for i in range(n):
        torch.add(x, x)  # A
        if i % 3 == 0:
            torch.add(x, x)  # B
        torch.mul(x, x)  # C


f(300)
