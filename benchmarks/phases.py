"""Overhead per phase of a training step (forward, backward, optimizer), in paired blocks: what
each phase costs unprofiled and under a deepcontext mode, and how many operator events it runs
(counted once with torch.profiler). A phase with shorter operators pays a larger ratio for the
same cost per event; this tells that apart from a cost only one phase pays. CPU only: on a GPU
backward runs on torch's autograd thread, which the main thread's clock does not see.

    python benchmarks/phases.py --model gpt2_train --mode python,op --rounds 8
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time

import model_zoo
import torch
from torch.profiler import ProfilerActivity, profile, record_function

import deepcontext

PHASES = ("forward", "backward", "optimizer")


# The step's loss, built as model_zoo.py builds the training step around it (CPU sizes).
LOSSES = {"gpt2_train": model_zoo.gpt2_loss, "bert_train": model_zoo.bert_loss}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2_train")
    p.add_argument("--mode", default="python,op")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    if args.model not in LOSSES:
        p.error(f"--model {args.model}: one of {', '.join(LOSSES)}")
    torch.manual_seed(0)
    model, loss_fn = LOSSES[args.model]("cpu", True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(acc: list[float], mark=lambda _name: contextlib.nullcontext()) -> None:
        t = [time.thread_time()]
        opt.zero_grad(set_to_none=True)
        with mark("forward"), torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn()
        t.append(time.thread_time())
        with mark("backward"):
            loss.backward()
        t.append(time.thread_time())
        with mark("optimizer"):
            opt.step()
        t.append(time.thread_time())
        for i in range(3):
            acc[i] += t[i + 1] - t[i]

    def block(n: int) -> list[float]:
        acc = [0.0] * 3
        for _ in range(n):
            step(acc)
        return [a / n for a in acc]

    block(5)
    off, on = [], []
    for _ in range(args.rounds):
        off.append(block(args.steps))
        out = tempfile.mktemp(suffix=".dcprof")
        with deepcontext.profile(output=out, context=args.mode, force=True, flush_interval=0.5):
            block(1)
            on.append(block(args.steps))
        os.unlink(out)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step([0.0] * 3, lambda name: record_function("phase:" + name))
    events = prof.events()
    spans = {e.name[6:]: (e.time_range.start, e.time_range.end) for e in events
             if e.name.startswith("phase:")}
    print(f"{args.model}, {args.mode}, {args.rounds} paired rounds of {args.steps} steps "
          f"(main-thread CPU, torch threads {torch.get_num_threads()})")
    for i, name in enumerate(PHASES):
        a, b = spans[name]
        n = sum(1 for e in events if not e.name.startswith("phase:")
                and a <= e.time_range.start and e.time_range.end <= b)
        base = statistics.median(r[i] for r in off)
        ratio = statistics.median(y[i] / x[i] for x, y in zip(off, on))
        extra = statistics.median(y[i] - x[i] for x, y in zip(off, on))
        print(f"{name:10s} off {base * 1e3:7.3f} ms  {n:5d} events ({n / (base * 1e3):5.1f}/ms)  "
              f"x{ratio:.3f}  +{extra * 1e6 / n:.2f} us/event")


if __name__ == "__main__":
    main()
