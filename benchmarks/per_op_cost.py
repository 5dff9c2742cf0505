"""Per-operator cost of the operator layer: a loop of tiny torch.add calls, timed in thread CPU
time, unprofiled / under deepcontext (python,op and python,op,native) / under torch.profiler, at
Python depth 0 and 30, in one process.

A shared machine drifts by more than these costs between one block and the next, so the blocks
are paired: each round runs one block per mode in rotated order, each mode's cost is its block
minus the round's unprofiled block, and the median over rounds is reported with its range.

Usage: python benchmarks/per_op_cost.py [--rounds 15] [--ops 50000]"""

import argparse
import statistics
import tempfile
import time

import torch

import deepcontext
from deepcontext import _core

x = torch.ones(4)


def ns_per_op(n: int) -> float:
    for _ in range(n // 10):
        torch.add(x, x)
    t = time.thread_time()
    for _ in range(n):
        torch.add(x, x)
    return (time.thread_time() - t) / n * 1e9


def at_depth(depth: int, fn):
    return at_depth(depth - 1, fn) if depth else fn()


def block(mode: str, depth: int, n: int, path: str) -> float:
    if mode == "off":
        return at_depth(depth, lambda: ns_per_op(n))
    if mode == "torch.profiler":
        with torch.profiler.profile():
            return at_depth(depth, lambda: ns_per_op(n))
    with deepcontext.profile(path, context=mode, force=True):
        return at_depth(depth, lambda: ns_per_op(n))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--ops", type=int, default=50_000, help="operators per block")
    args = p.parse_args()
    modes = ["off", "python,op", "python,op,native", "torch.profiler"]
    print(f"{args.rounds} rounds of {args.ops} torch.add calls per mode; native frames: "
          f"{_core.native_info()['unwinder']}; ns per operator, median over rounds (range) of the "
          f"block minus the same round's unprofiled block")
    with tempfile.TemporaryDirectory() as d:
        for depth in (0, 30):
            added: dict[str, list[float]] = {m: [] for m in modes[1:]}
            base = []
            for r in range(args.rounds):
                order = modes[r % len(modes):] + modes[:r % len(modes)]
                got = {m: block(m, depth, args.ops, f"{d}/p.dcprof") for m in order}
                base.append(got["off"])
                for m in modes[1:]:
                    added[m].append(got[m] - got["off"])
            cols = "; ".join(f"{m} +{statistics.median(v):.0f} ({min(v):+.0f} to {max(v):+.0f})"
                             for m, v in added.items())
            print(f"Python depth {depth}: unprofiled {statistics.median(base):.0f} ns/op; {cols}")


if __name__ == "__main__":
    main()
