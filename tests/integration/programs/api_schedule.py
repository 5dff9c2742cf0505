import sys

import torch

import deepcontext

out = sys.argv[1]
x = torch.ones(4)
with deepcontext.profile(out, schedule=deepcontext.schedule(wait=1, warmup=1, active=2, repeat=1),
                         force=True) as prof:
    for step in range(6):
        torch.add(x, x)  # STEP
        prof.step()
tree = deepcontext.load(out)
adds = [n for n in tree.nodes if n.frame.name == "aten::add"]
print(sum(tree.exclusive(n.id, "op.count") for n in adds))
