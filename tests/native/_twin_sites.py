"""Operators whose native stacks differ in one return address only: torch.add from two call
sites of one C frame (the test extension's dcn_twin), alternating, at the same depth. argv: the
extension's folder, the profile's path, the run's calls."""
import sys

sys.path.insert(0, sys.argv[1])

import torch  # noqa: E402

import dcnative_chain  # noqa: E402
import deepcontext  # noqa: E402

x = torch.ones(4)


def add():
    torch.add(x, x)  # at:add


with deepcontext.profile(sys.argv[2], context="python,op,native", sample_interval=0):
    for i in range(int(sys.argv[3])):
        dcnative_chain.twin(add, i % 2)  # at:loop
