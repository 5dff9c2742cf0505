"""Summing a tensor's elements in Python, one .item() per element, every step. The fix is one
reduction and a single .item()."""
import torch
from _harness import run, variant


def total(values, fixed):
    if fixed:
        return values.sum().item()
    s = 0.0
    for v in values:
        s += v.item()  # ITEM
    return s


def main(fixed: bool) -> None:
    torch.set_num_threads(1)
    values = torch.randn(2000)
    run(lambda: total(values, fixed), steps=10)
    print("done")


if __name__ == "__main__":
    main(variant() == "after")
