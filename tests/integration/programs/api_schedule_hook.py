"""A schedule's pauses switch the operator hook off in torch (its dispatcher bindings restored)
and its active steps on again; with argv[2] == "late", torch is first imported during a pause.

argv: OUT [late]
"""

import sys

import deepcontext

late = sys.argv[2:] == ["late"]
if not late:
    import torch

states = []
with deepcontext.profile(sys.argv[1], schedule=deepcontext.schedule(wait=1, active=1, repeat=2),
                         context="python,op", force=True) as prof:
    for step in range(6):
        import torch

        from deepcontext.capture import torch_ops

        torch.add(torch.ones(4), 1)  # STEP
        states.append(torch_ops._compiled.rebound()[0] > 0)
        prof.step()
tree = deepcontext.load(sys.argv[1])
adds = sum(tree.exclusive(n.id, "op.count") for n in tree.nodes if n.frame.name == "aten::add")
print(" ".join("on" if s else "off" for s in states), adds)
