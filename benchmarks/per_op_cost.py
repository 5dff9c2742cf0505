"""Per-operator cost of the operator layer: a loop of tiny torch.add calls, timed in thread CPU
time (robust to other load), unprofiled / under deepcontext (python,op and python,op,native, at
Python depth 0 and 30) / under torch.profiler, one process.
Usage: python benchmarks/per_op_cost.py"""

import tempfile
import time

import torch

import deepcontext
from deepcontext import _core

x = torch.ones(4)


def ns_per_op(n: int = 200_000) -> float:
    for _ in range(n // 10):
        torch.add(x, x)
    t = time.thread_time()
    for _ in range(n):
        torch.add(x, x)
    return (time.thread_time() - t) / n * 1e9


def at_depth(depth: int, fn):
    return at_depth(depth - 1, fn) if depth else fn()


with tempfile.TemporaryDirectory() as d:
    base = ns_per_op()
    with deepcontext.profile(f"{d}/p.dcprof", context="python,op"):
        dc = ns_per_op()
    after = ns_per_op()
    with torch.profiler.profile():
        tp = ns_per_op()
    print(f"unprofiled {base:.0f} ns/op; deepcontext python,op {dc:.0f} (+{dc - base:.0f}); "
          f"unprofiled after a session {after:.0f}; torch.profiler {tp:.0f} (+{tp - base:.0f})")
    print(f"native frames ({_core.native_info()['unwinder']}):")
    for depth in (0, 30):
        off = at_depth(depth, ns_per_op)
        with deepcontext.profile(f"{d}/a{depth}.dcprof", context="python,op"):
            po = at_depth(depth, ns_per_op)
        with deepcontext.profile(f"{d}/n{depth}.dcprof", context="python,op,native"):
            nat = at_depth(depth, ns_per_op)
        print(f"  Python depth {depth}: unprofiled {off:.0f} ns/op; python,op +{po - off:.0f}; "
              f"python,op,native +{nat - off:.0f}")
