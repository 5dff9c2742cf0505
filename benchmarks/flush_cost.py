"""What one periodic flush of a session costs, by part: the core's snapshot, the tree built from
it, and the profile written (``ProfileWriter.write``), each flush after more steps of a
model_zoo.py model. A periodic flush runs on the flusher thread and holds the GIL for most of
that time, so the program's thread waits about as long (longer where torch's intra-op threads
lose a core to it: models.py ``+flush0.05`` shows that part).

Two ways from the same snapshot, in alternating order: ``extended``, what a periodic flush does
(the last tree extended with what is new, only the new rows inserted: capture/snapshot.py
TreeBuilder), and ``whole`` (built and written whole, what every flush did before d77a4fa and
the final flush still does). Medians of wall time per flush; CPU time of the thread.

--after MODELS: first profile these models, each in a session of its own and for three steps,
in the same process (a notebook's earlier cells). The core keeps their contexts (its tree
outlives sessions); since 25e0819 a snapshot copies only the session's own.

--stall SECONDS: what the flushes cost the program instead. The model runs steps for that long
under a session that flushes every 0.2 s; the steps that overlap a periodic flush take longer
than the median of the others by the program's stall, summed and divided by the flushes. Runs
with any deepcontext version on PYTHONPATH (a build of an older commit, to compare).

    python benchmarks/flush_cost.py --model gpt2_train --flushes 20
    python benchmarks/flush_cost.py --model gpt2_train --stall 6 [--threads 1]
    python benchmarks/flush_cost.py --model gpt2_train --after bert_train,gcn_train,gpt2_generate
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import model_zoo
import torch

import deepcontext
from deepcontext import monitor
from deepcontext.capture import session as session_module
from deepcontext.tree.profile_file import ProfileWriter


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2_train")
    p.add_argument("--device", default="cpu")
    p.add_argument("--context", default="python,op,gpu")
    p.add_argument("--flushes", type=int, default=20, help="of each way")
    p.add_argument("--steps", type=int, default=2, help="steps before each flush")
    p.add_argument("--stall", type=float, metavar="SECONDS")
    p.add_argument("--threads", type=int, help="torch's intra-op threads")
    p.add_argument("--after", default="", metavar="MODELS",
                   help="models profiled first, each in a session of its own (comma-separated)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for name in filter(None, args.after.split(",")):
        earlier = model_zoo.MODELS[name][0](args.device, args.device == "cpu")
        with tempfile.TemporaryDirectory() as d:
            with deepcontext.profile(output=Path(d) / "p.dcprof", context=args.context):
                for _ in range(3):
                    earlier()
    step = model_zoo.MODELS[args.model][0](args.device, args.device == "cpu")
    for _ in range(3):
        step()
    if args.stall:
        return stall(step, args)
    from deepcontext.capture.snapshot import TreeBuilder
    ways = ("extended", "whole")
    times: dict[str, dict[str, list[float]]] = {
        way: {"build": [], "write": [], "cpu": []} for way in ways}
    snapshots: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        with deepcontext.profile(output=Path(d) / "p.dcprof", context=args.context, force=True,
                                 flush_interval=1e6) as prof:  # (no periodic flush of its own)
            for _ in range(10):
                step()
            core, session = monitor._core(), session_module._active
            builders = {way: TreeBuilder() for way in ways}
            writers = {way: ProfileWriter(Path(d) / f"{way}.dcprof") for way in ways}
            for i in range(args.flushes):
                for _ in range(args.steps):
                    step()
                    prof.step()
                t0 = time.perf_counter()
                raw = core.snapshot()
                snapshots.append(time.perf_counter() - t0)
                for way in ways if i % 2 == 0 else ways[::-1]:
                    c0, t0 = time.thread_time(), time.perf_counter()
                    tree = builders[way].build(raw, session.metadata(False), fresh=way == "whole")
                    t1 = time.perf_counter()
                    writers[way].write(tree)
                    t2, c2 = time.perf_counter(), time.thread_time()
                    for key, value in (("build", t1 - t0), ("write", t2 - t1), ("cpu", c2 - c0)):
                        times[way][key].append(value)
            nodes = len(tree.nodes)
            for w in writers.values():
                w.close()
    print(f"{args.model} ({args.device}, {args.context}): {nodes} contexts, "
          f"{args.flushes} flushes each way, {args.steps} steps before each"
          + (f"; after sessions of {args.after}" if args.after else "")
          + f"; the core holds {_tree_size()} contexts")
    print(f"the core's snapshot: {statistics.median(snapshots) * 1e3:.2f} ms (median)")
    print("| flush | build ms | write ms | build + write ms | CPU ms |")
    print("|---|---:|---:|---:|---:|")
    for way, t in times.items():
        total = statistics.median(a + b for a, b in zip(t["build"], t["write"]))
        print(f"| {way} | {statistics.median(t['build']) * 1e3:.2f} | "
              f"{statistics.median(t['write']) * 1e3:.2f} | {total * 1e3:.2f} | "
              f"{statistics.median(t['cpu']) * 1e3:.2f} |")
    return 0


def _tree_size() -> int | str:
    size = getattr(monitor._core(), "tree_size", None)  # (builds before this commit: none)
    return size() if size else "?"


def stall(step, args) -> int:
    spans: list[tuple[float, float]] = []  # each flush's start and end, on the flusher
    flush = session_module.Session._flush

    def timed_flush(self, complete: bool) -> None:
        t = time.perf_counter()
        flush(self, complete)
        spans.append((t, time.perf_counter()))

    session_module.Session._flush = timed_flush
    steps: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as d:
        with deepcontext.profile(output=Path(d) / "p.dcprof", context=args.context, force=True,
                                 flush_interval=0.2) as prof:
            end = time.perf_counter() + args.stall
            while time.perf_counter() < end:
                t = time.perf_counter()
                step()
                prof.step()
                steps.append((t, time.perf_counter()))
    periodic = spans[1:-1]  # (the first at start and the last at stop are outside the steps)
    hit = {s for s in steps if any(a < s[1] and b > s[0] for a, b in periodic)}
    free = [b - a for a, b in steps if (a, b) not in hit]
    base = statistics.median(free)
    excess = sum(b - a - base for a, b in hit)
    print(f"{args.model} ({args.device}, {args.context}, torch threads "
          f"{torch.get_num_threads()}), deepcontext from {deepcontext.__file__}")
    print(f"{len(periodic)} periodic flushes, {statistics.median(b - a for a, b in periodic) * 1e3:.1f}"
          f" ms each on the flusher thread (median); step {base * 1e3:.2f} ms (median without one); "
          f"{len(hit)} steps overlapped one; the program's stall per flush: "
          f"{excess / max(len(periodic), 1) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
