"""torch.profiler inside a deepcontext session, for tests/integration/test_nested_ops.py: it
still sees the operators that operators call and the autograd engine's wrappers, and once the
session ends torch's own bindings are back.

    python beside_torch_profiler.py OUT.dcprof [DEVICE]

On CUDA the backward pass runs on the autograd engine's device thread, which takes the calling
thread's RecordFunction state (torch.profiler's callbacks) for every node it runs.
"""

import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import deepcontext
from deepcontext.capture import torch_ops

device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
x = torch.ones(8, 4, device=device, requires_grad=True)
w = torch.ones(3, 4, device=device, requires_grad=True)
with deepcontext.profile(sys.argv[1], context="python,op", force=True):
    F.linear(x, w).sum().backward()  # ALONE
    query, state, wrapper = torch_ops._compiled.rebound()
    print(f"session: query rebound {query > 0}, state setter rebound {state > 0}, "
          f"wrapper query rebound {wrapper > 0}")
    with profile(activities=[ProfilerActivity.CPU]) as beside:
        F.linear(x, w).sum().backward()  # BESIDE
    seen = {e.name for e in beside.events()}
    print("torch.profiler saw:", " ".join(sorted(seen & {
        "aten::linear", "aten::t", "aten::mm", "aten::matmul", "MmBackward0",
        "autograd::engine::evaluate_function: MmBackward0"})))
print("after the session:", torch_ops._compiled.rebound())
