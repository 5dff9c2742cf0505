import sys

import torch

import deepcontext

x = torch.ones(4)


def first():
    for _ in range(10):
        torch.add(x, x)


def second():
    for _ in range(7):
        torch.mul(x, x)


out = sys.argv[1]
with deepcontext.profile(out + ".1", force=True):
    first()
first()  # between sessions: not profiled
with deepcontext.profile(out + ".2", force=True):
    second()
t1, t2 = deepcontext.load(out + ".1"), deepcontext.load(out + ".2")
names1 = {n.frame.name for n in t1.nodes}
names2 = {n.frame.name for n in t2.nodes}
count = sum(t2.exclusive(n.id, "op.count") for n in t2.nodes if n.frame.name == "aten::mul")
print("first" in names1, "first" in names2, "second" in names2, int(count),
      t2.metadata["op_tier"])
