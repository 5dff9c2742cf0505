"""Known allocations at known lines, for the memory layer's exact-bytes test."""

import sys
import threading

import torch

LEAK = []  # grows by one tensor per step and is never emptied


def step():
    a = torch.empty(1000, dtype=torch.float32)  # TEMP: 4,000 bytes, freed at return
    LEAK.append(torch.empty(250, dtype=torch.float64))  # LEAK: 2,000 bytes, kept
    return a.numel()


def peak():
    big = torch.empty(1 << 20, dtype=torch.uint8)  # PEAK: 1 MiB, the process's peak
    del big


def grad():
    x = torch.ones(64, 32, requires_grad=True)
    w = torch.ones(64, 32, requires_grad=True)
    y = x * w  # MUL: 8,192 bytes forward; its backward allocates both gradients (2 x 8,192)
    y.sum().backward()  # BACKWARD
    return float(x.grad.sum())


def in_thread():
    t = torch.empty(512, dtype=torch.float64)  # THREAD: 4,096 bytes on a new thread
    del t


def many(n):
    keep = [torch.empty(16) for _ in range(n)]  # MANY
    return len(keep)


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for _ in range(steps):
        step()
    peak()
    g = grad()
    th = threading.Thread(target=in_thread)
    th.start()
    th.join()
    if len(sys.argv) > 2:
        many(int(sys.argv[2]))
    print(f"memory program done {g:.0f}")
    sys.exit(3)
