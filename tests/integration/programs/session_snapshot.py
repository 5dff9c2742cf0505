"""Three sessions in one process: a snapshot of the core holds only the session's contexts (and
those it is asked to keep), by their ids in the core, which stay the same from one session to the
next. Prints "ok"."""
import sys

import torch

import deepcontext
from deepcontext import monitor
from deepcontext.tree import load


def first_only(x):
    return x.tanh()


def second_only(x):
    return x.sigmoid()


def ids_of(raw, name):
    nodes, frames, _, _, ids = raw
    return [ids[i] for i, (_, f) in enumerate(nodes) if frames[f][1] == name]


out, x, seen = sys.argv[1], torch.randn(8, 8), []
for k, fn in enumerate([first_only, second_only, first_only]):  # (the same lines each time)
    with deepcontext.profile(output=f"{out}.{k}", context="python,op", force=True):
        for _ in range(50):
            fn(x)
        seen.append(monitor._core().snapshot())
    if k == 1:
        raw = seen[1]
        nodes, frames, _, metrics, ids = raw
        assert ids_of(raw, "first_only") == [] and len(ids_of(raw, "second_only")) == 1
        assert len(nodes) == len(ids) and ids[0] == 0 and ids == sorted(set(ids)), ids
        assert all(0 <= parent < i for i, (parent, _) in enumerate(nodes[1:], 1))
        assert sorted({f for _, f in nodes}) == list(range(len(frames)))  # (the frames used)
        assert {node for node, _, _ in metrics} <= set(range(len(nodes)))
        core = monitor._core()
        kept = core.child_node(0, 8, "kept, no metric", "")
        assert ids_of(core.snapshot(), "kept, no metric") == []
        assert ids_of(core.snapshot([kept]), "kept, no metric") == [kept]
        names = {n.frame.name for n in load(f"{out}.1").nodes}
        assert "second_only" in names and "first_only" not in names, names
(at,) = ids_of(seen[0], "first_only")
assert ids_of(seen[2], "first_only") == [at] and ids_of(seen[2], "second_only") == []
print("ok")
