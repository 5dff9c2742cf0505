"""Shared timing for the before/after programs: median step time, printed as the last line."""

import json
import statistics
import sys
import time

import torch


def time_steps(step, steps: int = 20, warmup: int = 3) -> None:
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    print(json.dumps({"median_step_s": statistics.median(times)}), flush=True)


def variant() -> str:
    return sys.argv[1] if len(sys.argv) > 1 else "before"
