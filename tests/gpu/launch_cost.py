"""Per-launch host cost of each capture layer on a launch-bound loop (one tiny kernel per op).

    python tests/gpu/launch_cost.py MODE [LAUNCHES]
MODE: off | torch | a deepcontext context such as python,op or python,op,gpu or gpu.
Prints one line: MODE, best-of-5 microseconds per launch, and the GPU note if any.
"""

import os
import sys
import tempfile
import time

import torch

import deepcontext

mode = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
x = torch.zeros(16, device="cuda")


def loop(count: int) -> None:
    for _ in range(count):
        x.add_(1.0)
    torch.cuda.synchronize()


def best() -> float:
    loop(2000)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        loop(n)
        times.append((time.perf_counter() - t0) / n * 1e6)
    return min(times)


note = ""
if mode == "off":
    us = best()
elif mode == "torch":
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        us = best()
else:
    out = os.path.join(tempfile.mkdtemp(), "cost.dcprof")
    with deepcontext.profile(output=out, context=mode, sample_interval=0.01):
        us = best()
    tree = deepcontext.load(out)
    note = "; ".join(n for n in tree.metadata.get("notes", []) if "GPU" in n)
    gpu = tree.metadata.get("gpu", {})
    note += f" kernels={gpu.get('kernels')} pending={gpu.get('pending')} nested={gpu.get('nested_matches')}"
    loop_line = [n.id for n in tree.nodes if n.frame.kind == "python" and n.frame.name == "loop"]
    attributed = sum(tree.inclusive(i, "gpu.launches") for i in loop_line)
    note += f" launches_at_loop={attributed:.0f}/{tree.total('gpu.launches'):.0f}"
print(f"{mode:16s} {us:7.2f} us/launch {note}")
