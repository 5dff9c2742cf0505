"""What every real program of the analyzer suite shares: run a step function a fixed number of
times after its set-up, and, when DEEPCONTEXT_FIX_TIMING is set (benchmarks/fix_gains.py), print
the median and the fastest step time as the last line (the variant's steady-state cost; on a
shared machine the fastest step is the least disturbed one)."""

import json
import os
import statistics
import sys
import time


def device() -> str:
    """``cuda`` when the GPU suite runs the program (DEEPCONTEXT_SUITE_DEVICE=cuda), else cpu."""
    return os.environ.get("DEEPCONTEXT_SUITE_DEVICE", "cpu")


def synchronize() -> None:
    if device() == "cuda":
        import torch
        torch.cuda.synchronize()


def variant(default: str = "before") -> str:
    """``before`` (the program as written) or ``after`` (with the analyzer's fix applied)."""
    return sys.argv[1] if len(sys.argv) > 1 else default


def run(step, steps: int) -> None:
    timing = os.environ.get("DEEPCONTEXT_FIX_TIMING")
    sync = synchronize if device() == "cuda" else None
    if device() == "cpu":
        import torch
        torch.set_num_threads(1)  # one core each: steadier on a shared 2-core machine
    if not timing:
        for _ in range(steps):
            step()
        synchronize()
        return
    for _ in range(3):  # warm-up: first-call costs are not the steady state being compared
        step()
    times = []
    for _ in range(int(timing) if timing.isdigit() and int(timing) > 1 else steps):
        if sync:
            sync()
        t = time.perf_counter()
        step()
        if sync:
            sync()
        times.append(time.perf_counter() - t)
    print(json.dumps({"median_step_s": statistics.median(times), "min_step_s": min(times)}),
          flush=True)
