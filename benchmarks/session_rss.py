"""Resident memory after each of N deepcontext sessions in one process.

A program that profiles in several sessions (a schedule per epoch, a notebook's cells) must not
grow by what one session allocates: a leak per session climbs by that much every line, where
memory freed at each stop leaves the line flat after the first session's one-time costs (the
torch hook, threads, CUPTI's libraries).

    python benchmarks/session_rss.py --device cuda --sessions 30
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
from overhead import rss  # (after gc.collect() and malloc_trim(0))

import deepcontext


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--context", default=None, help="default: python,op (+gpu on cuda)")
    p.add_argument("--sessions", type=int, default=30)
    p.add_argument("--steps", type=int, default=20, help="training steps a session")
    args = p.parse_args()
    context = args.context or ("python,op,gpu" if args.device.startswith("cuda") else "python,op")
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).to(args.device)
    x = torch.randn(64, 256, device=args.device)

    def step() -> None:
        model(x).sum().backward()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    for _ in range(20):
        step()
    base = rss()
    out = tempfile.mkdtemp()
    for i in range(args.sessions):
        with deepcontext.profile(os.path.join(out, f"s{i}.dcprof"), context=context, force=True) as prof:
            for _ in range(args.steps):
                step()
                prof.step()
        r = rss()
        print(f"session {i + 1:3d}: RSS {r / 2**20:8.1f} MiB, +{(r - base) / 2**20:6.2f} MiB over the start",
              flush=True)


if __name__ == "__main__":
    main()
