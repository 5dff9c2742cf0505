"""Operators nested in an operator whose `::call` runs RecordFunction itself: x.contiguous() on a
transposed tensor (aten::contiguous -> aten::clone -> ...). argv: the profile's path, the calls."""
import sys

import torch

import deepcontext

x = torch.ones(8, 8).t()

with deepcontext.profile(sys.argv[1], context="python,op,nested,native", sample_interval=0):
    for _ in range(int(sys.argv[2])):
        x.contiguous()
