"""A session whose program reaches new code between flushes: at each point, the tree a periodic
flush extends (TreeBuilder, not fresh) equals one built whole from the same snapshot of the
core, and the session's own periodic writes read back as profiles. Prints the checks' count."""
import sys
import time

import torch

import deepcontext
from deepcontext import monitor
from deepcontext.capture.snapshot import TreeBuilder
from deepcontext.tree import load


def paths(tree):
    """Each context's path from the root (Frames), with its metrics: one per context."""
    out = {tuple(tree.path(n.id)): dict(n.metrics) for n in tree.nodes}
    assert len(out) == len(tree.nodes)
    return out


def linear(x, w):
    return torch.nn.functional.linear(x, w).relu()


def reduce(x):
    return x.sum(dim=0).softmax(dim=0)


def phase(k, x, w):
    for _ in range(200):
        y = linear(x, w) if k != 1 else reduce(x)
        if k == 2:
            y = torch.cat([y, y]).tanh()
    return y


out = sys.argv[1]
x, w = torch.randn(64, 32), torch.randn(32, 32)
builder, checked = TreeBuilder(), 0
with deepcontext.profile(output=out, context="python,op", flush_interval=0.05, force=True) as prof:
    for k in range(3):
        phase(k, x, w)
        raw = monitor._core().snapshot()
        extended = builder.build(raw, {}, fresh=False)
        assert paths(extended) == paths(TreeBuilder().build(raw, {})), k
        checked += 1
    deadline = time.monotonic() + 10
    while prof.flushes < 4 and time.monotonic() < deadline:
        phase(2, x, w)
    assert prof.flushes >= 4, prof.flushes
    mid = load(out)  # a periodic write, of the tree the flusher extended
    mid.self_check()
    assert mid.total("op.count") > 0
final = load(out)
assert final.total("op.count") >= mid.total("op.count")
ops = {n.frame.name for n in final.nodes if n.frame.kind == "op"}
assert {"aten::linear", "aten::relu", "aten::sum", "aten::softmax", "aten::cat", "aten::tanh"} <= ops, ops
print(checked)
