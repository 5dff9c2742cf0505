"""Operators that call operators, for tests/integration/test_nested_ops.py.

    python nested_ops.py OUT.dcprof CONTEXT
"""

import sys

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import deepcontext

STEPS = 3


class Passthrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))  # REDISPATCH


x = torch.ones(8, 4, requires_grad=True)
w = torch.ones(3, 4, requires_grad=True)
with deepcontext.profile(sys.argv[1], context=sys.argv[2], force=True):
    for _ in range(STEPS):
        y = F.linear(x, w)  # LINEAR
        y.sum().backward()  # BACKWARD
        z = x.detach().t().contiguous()  # CONTIGUOUS
        with Passthrough():
            torch.add(z, 1)  # UNDER_MODE
print("done")
