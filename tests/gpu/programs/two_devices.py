"""Kernels on two devices from two lines (tests/gpu/test_gpu_devices.py)."""

import torch

A_OPS = 3
B_OPS = 4

a = torch.randn(1024, 1024, device="cuda:0")
b = torch.randn(1024, 1024, device="cuda:1")
for _ in range(A_OPS):
    a = a * 1.5  # DEVICE0
for _ in range(B_OPS):
    b = b * 1.5  # DEVICE1
torch.cuda.synchronize(0)
torch.cuda.synchronize(1)
print("done")
