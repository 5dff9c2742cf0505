"""Where the main thread's time goes under each capture mode, by library and symbol: a
direct attribution of the profiler's cost that needs no paired timing.

A high-resolution timer samples the main thread's instruction pointer every interval of wall
time (``_pc_sampler.c``, compiled here at first use with the system C compiler; no perf, no
PMU); a sample that finds the thread blocked lands in the C library's waiting call. Each
address is mapped to its library through /proc/self/maps and to a symbol with ``nm``. The
time found in the profiler's own code (deepcontext's core and torch hook, CUPTI, torch's
RecordFunction) is its direct cost per step; the CUDA driver's time per launch, against the
unprofiled blocks', is what CUPTI adds inside the driver. Costs that show up elsewhere (caches
the profiler evicts) stay in the remainder, which ``models.py``'s paired timing measures.

    python benchmarks/where.py --device cuda --models gpt2_train,gpt2_generate --steps 30
    python benchmarks/where.py --device cpu --small --models gpt2_train --mode op --mode python,op
    python benchmarks/where.py --device cuda --models gpt2_train --thread pt_autograd
"""

from __future__ import annotations

import argparse
import bisect
import ctypes
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import threads
from cbuild import build_c_library

HERE = Path(__file__).resolve().parent

# Categories, first match wins: (name, library pattern, symbol pattern or None).
CATEGORIES = [
    ("deepcontext core", r"deepcontext/_core", None),
    ("deepcontext torch hook", r"dc_torch_hook", None),
    ("CUPTI", r"libcupti", None),
    ("CUDA driver", r"libcuda\.so", None),
    ("CUDA runtime", r"libcudart", None),
    ("RecordFunction", r"libtorch|libc10",
     r"RecordFunction|StepCallbacks|callWithDispatchKeySlowPath|getStepCallbacks"
     r"|record_function_tls|CallbackManager|ObserverContext|sequence_number"),
    ("Python", r"libpython|/python3\.\d+$", None),
    ("torch", r"libtorch|libc10|_C\.cpython", None),
    ("libc, libstdc++", r"libc\.so|libstdc\+\+|libm\.so|ld-linux", None),
    ("vdso (clocks)", r"\[vdso\]", None),
]


def compile_sampler() -> ctypes.CDLL:
    so = ctypes.CDLL(str(build_c_library("_pc_sampler.c", "-lrt")))
    so.pcs_start.argtypes = [ctypes.c_long]
    so.pcs_start_thread.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_long]
    so.pcs_stop.restype = ctypes.c_long
    so.pcs_count.argtypes = [ctypes.c_int]
    so.pcs_count.restype = ctypes.c_long
    so.pcs_data.restype = ctypes.POINTER(ctypes.c_uint64)
    so.pcs_data_of.argtypes = [ctypes.c_int]
    so.pcs_data_of.restype = ctypes.POINTER(ctypes.c_uint64)
    return so


class Mapper:
    """Address -> (library, symbol), from /proc/self/maps and nm (read once per library)."""

    def __init__(self) -> None:
        self.maps = []
        for line in Path("/proc/self/maps").read_text().splitlines():
            parts = line.split(None, 5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            path = parts[5] if len(parts) > 5 else "[anon]"
            self.maps.append((lo, hi, int(parts[2], 16), path))
        self.maps.sort()
        self.starts = [m[0] for m in self.maps]
        self.base: dict[str, int] = {}
        for lo, _, off, path in self.maps:
            if off == 0 and path not in self.base:
                self.base[path] = lo
        self.symbols: dict[str, tuple[list[int], list[str]]] = {}

    def library(self, pc: int) -> tuple[str, int]:
        i = bisect.bisect_right(self.starts, pc) - 1
        if i < 0 or pc >= self.maps[i][1]:
            return "[unknown]", pc
        path = self.maps[i][3]
        return path, pc - self.base.get(path, self.maps[i][0] - self.maps[i][2])

    def symbol_at(self, path: str, addr: int) -> tuple[str, int]:
        """The symbol holding ``addr`` and ``addr``'s offset in it."""
        if path not in self.symbols:
            table: dict[int, str] = {}
            if path.startswith("/"):
                for flags in (["-D"], []):
                    out = subprocess.run(["nm", "-C", "--defined-only", *flags, path],
                                         capture_output=True, text=True).stdout
                    for line in out.splitlines():
                        m = re.match(r"([0-9a-f]+) [tTwWi] (.*)", line)
                        if m:
                            table.setdefault(int(m.group(1), 16), m.group(2))
            keys = sorted(table)
            self.symbols[path] = (keys, [table[k] for k in keys])
        keys, names = self.symbols[path]
        i = bisect.bisect_right(keys, addr) - 1
        return (names[i], addr - keys[i]) if i >= 0 else ("?", 0)


def categorize(path: str, sym: str) -> str:
    for name, lib, pattern in CATEGORIES:
        if re.search(lib, path) and (pattern is None or re.search(pattern, sym)):
            return name
    return "other"


# A sample that falls due while the kernel delivers deepcontext's SIGPROF is taken when the
# thread returns to user space, and its frame then sits on top of the handler's: it reads the
# handler's first instruction. Measured on the CPU VM (gpt2_generate, 2026-12-03): every sample
# in on_sigprof was at offset 0, and perf's cpu-clock sampling, no signal involved, found
# on_sigprof under 0.01%. Such samples are the kernel's timer and signal work, or time
# re-attributed from wherever the thread was, never the handler's code.
SIGNAL_ENTRY = "signal delivery (handler entry)"


def attribute(pcs: list[int], mapper: Mapper) -> tuple[Counter, Counter]:
    cats, syms = Counter(), Counter()
    for pc, n in Counter(pcs).items():
        path, addr = mapper.library(pc)
        sym, offset = mapper.symbol_at(path, addr)
        if offset == 0 and "on_sigprof" in sym:
            cats[SIGNAL_ENTRY] += n
            syms[(Path(path).name, f"{sym[:80]} (entry: {SIGNAL_ENTRY})")] += n
            continue
        cats[categorize(path, sym)] += n
        syms[(Path(path).name, sym[:110])] += n
    return cats, syms


def run_mode(mode: str, step, steps: int, dev: str, sampler, interval_ns: int, tmp: Path,
             other: str | None = None) -> dict:
    import torch

    import deepcontext

    second: dict = {}

    def block() -> tuple[list[int], float, float]:
        if dev.startswith("cuda"):
            torch.cuda.synchronize()
        sampler.pcs_reset()
        tid = next(iter(threads.named(other)), (None, ""))[0] if other else None
        c0, t0 = time.thread_time(), time.perf_counter()
        o0 = threads.cpu_seconds(tid) if tid else 0.0
        if sampler.pcs_start(interval_ns) != 0:
            raise SystemExit("where.py: could not start the wall-clock timer")
        if tid and sampler.pcs_start_thread(1, tid, interval_ns) != 0:
            raise SystemExit(f"where.py: could not start the timer of thread {tid} ({other})")
        for _ in range(steps):
            step()
        if dev.startswith("cuda"):
            torch.cuda.synchronize()
        n = sampler.pcs_stop()
        cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
        data = sampler.pcs_data()
        if tid:
            other_data = sampler.pcs_data_of(1)
            second.update(pcs2=[other_data[i] for i in range(sampler.pcs_count(1))],
                          cpu2=(threads.cpu_seconds(tid) - o0) / steps)
        return [data[i] for i in range(n)], cpu, wall

    spec = mode.partition("#")[0]  # (a '#label' tells two blocks of one mode apart)
    if spec in ("off", "pristine"):
        pcs, cpu, wall = block()
        extra = {}
    else:
        spec, _, diag = spec.partition("%")
        context, _, interval = spec.partition("@")
        kw = {"sample_interval": float(interval)} if interval else {}
        out = tmp / f"where-{time.monotonic_ns()}.dcprof"
        # DEEPCONTEXT_GPU_DIAG's measuring switches (csrc/gpu/gpu_internal.h); 'attached'
        # leaves CUPTI attached after the session's stop (csrc/gpu/gpu.cpp: detach).
        # 'waiting' runs every timed step in a schedule's wait phase; 'done' after the schedule's
        # one active step (the untimed one).
        os.environ.pop("DEEPCONTEXT_GPU_DIAG", None)
        os.environ.pop("DEEPCONTEXT_CUPTI_DETACH", None)
        if diag == "waiting":
            kw["schedule"] = deepcontext.schedule(wait=10**9)
        elif diag == "done":
            kw["schedule"] = deepcontext.schedule(active=1, repeat=1)
        elif diag == "attached":
            os.environ["DEEPCONTEXT_CUPTI_DETACH"] = "0"
        elif diag:
            os.environ["DEEPCONTEXT_GPU_DIAG"] = diag
        with deepcontext.profile(output=out, context=context, force=True, flush_interval=0.5,
                                 **kw) as prof:
            step()
            prof.step()
            pcs, cpu, wall = block()
        tree = deepcontext.load(out)
        extra = {"ops": tree.total("op.count") / (steps + 1),
                 "launches": tree.total("gpu.launches") / (steps + 1)}
        out.unlink()
    return {"pcs": pcs, "cpu": cpu / steps, "wall": wall / steps, **extra, **second}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--models", default="gpt2_train")
    p.add_argument("--mode", action="append",
                   help="'off', 'pristine' (unprofiled, before the first session: its blocks run "
                   "first), or a context spec CONTEXT[@INTERVAL][%%DIAG] where DIAG is one of "
                   "DEEPCONTEXT_GPU_DIAG's values, 'attached' (CUPTI not detached at stop), "
                   "'waiting' (every step in a schedule's wait phase) or 'done' (every step "
                   "after the schedule's end); "
                   "'#LABEL' tells two blocks of one mode apart (repeatable; default: off, "
                   "python,op,gpu)")
    p.add_argument("--fixed-order", action="store_true",
                   help="run the modes in the order given in every round (default: rotated)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=2, help="blocks per mode, alternating")
    p.add_argument("--interval-us", type=int, default=100)
    p.add_argument("--small", action="store_true")
    p.add_argument("--threads", type=int, help="torch.set_num_threads")
    p.add_argument("--symbols", type=int, default=25, help="top symbols shown per mode")
    p.add_argument("--thread", metavar="PREFIX",
                   help="also sample the first thread whose OS name starts with PREFIX, in its "
                        "own table (pt_autograd: torch's autograd thread, where backward runs on "
                        "a GPU while the main thread waits; a thread that blocks signals, such "
                        "as deepcontext's sampler, gets no samples)")
    p.add_argument("--markdown")
    p.add_argument("--json")
    args = p.parse_args()
    modes = args.mode or ["off", "python,op,gpu"]
    if "off" not in modes and "pristine" not in modes:
        modes = ["off", *modes]
    base = "pristine" if "pristine" in modes else "off"
    sys.path.insert(0, str(HERE))
    import model_zoo
    import torch

    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    sampler = compile_sampler()
    lines = [f"# Where the main thread's CPU time goes, {args.device}, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             f"Command: `{shlex.join(['python', *sys.argv])}`", ""]
    from overhead import machine
    lines += [f"- {m}" for m in machine()]
    lines += [f"- {args.steps} steps a block, {args.rounds} blocks per mode (alternating); "
              f"the main thread sampled every {args.interval_us} us of wall time; us/step = "
              "samples x interval / steps, so the columns add up to the wall time per step "
              "(thread_time: its CPU time).", ""]
    dump: dict = {"command": shlex.join(["python", *sys.argv]), "models": {}}
    with tempfile.TemporaryDirectory(prefix="dc-where-") as d:
        tmp = Path(d)
        for name in args.models.split(","):
            builder, _ = model_zoo.MODELS[name]
            try:
                step = builder(args.device, args.small)
            except model_zoo.MissingLibrary as e:
                lines += [f"{name}: skipped ({e})", ""]
                continue
            for _ in range(5):
                step()
            runs: dict[str, list[dict]] = {m: [] for m in modes}
            if "pristine" in modes:  # before this model's first session; only then
                for r in range(args.rounds):
                    runs["pristine"].append(run_mode("pristine", step, args.steps, args.device,
                                                     sampler, args.interval_us * 1000, tmp,
                                                     args.thread))
            rotating = [m for m in modes if m != "pristine"]
            for r in range(args.rounds):
                k = 0 if args.fixed_order else r % len(rotating)
                for mode in rotating[k:] + rotating[:k]:
                    runs[mode].append(run_mode(mode, step, args.steps, args.device, sampler,
                                               args.interval_us * 1000, tmp, args.thread))
                    cpu_ms = runs[mode][-1]["cpu"] * 1e3
                    print(f"{name} round {r + 1} {mode}: {cpu_ms:.2f} CPU ms/step",
                          file=sys.stderr, flush=True)
            mapper = Mapper()
            lines += report(name, runs, modes, base, mapper, args, dump)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(dump, indent=1))
    return 0


def category_rows(cats_by_mode: dict, modes: list[str], per: float) -> list[str]:
    """The category table's rows: us per step in each category, then the sampled total."""
    out = ["| category (us/step) | " + " | ".join(modes) + " |", "|---|" + "---:|" * len(modes)]
    for c in [c for c, _, _ in CATEGORIES] + [SIGNAL_ENTRY, "other"]:
        if any(cats_by_mode[m][c] for m in modes):
            cells = " | ".join(f"{cats_by_mode[m][c] * per:.0f}" for m in modes)
            out.append(f"| {c} | {cells} |")
    out.append("| **sampled total** | " + " | ".join(
        f"**{sum(cats_by_mode[m].values()) * per:.0f}**" for m in modes) + " |")
    return out


def report(name: str, runs: dict, modes: list[str], base: str, mapper: Mapper, args,
           dump: dict) -> list[str]:
    per = args.interval_us / (args.steps * args.rounds)  # us per step per sample
    cats_by_mode, syms_by_mode = {}, {}
    for mode in modes:
        pcs = [pc for r in runs[mode] for pc in r["pcs"]]
        cats_by_mode[mode], syms_by_mode[mode] = attribute(pcs, mapper)
    ops = next((r.get("ops") for m in modes for r in runs[m] if r.get("ops")), 0)
    launches = next((r.get("launches") for m in modes for r in runs[m] if r.get("launches")), 0)
    out = [f"## {name}", "", f"{ops:.0f} operator events and {launches:.0f} kernel launches per "
           "step (the first profiled mode's profile).", ""]
    out += category_rows(cats_by_mode, modes, per)
    out.append("| thread_time | " + " | ".join(
        f"{sum(r['cpu'] for r in runs[m]) / len(runs[m]) * 1e6:.0f}" for m in modes) + " |")
    out.append("")
    dump["models"][name] = {m: {"categories": dict(cats_by_mode[m]),
                                "cpu": [r["cpu"] for r in runs[m]],
                                "wall": [r["wall"] for r in runs[m]],
                                "symbols": [[lib, s, n] for (lib, s), n
                                            in syms_by_mode[m].most_common(200)]}
                            for m in modes}
    for mode in modes:
        if mode == base:
            continue
        out += [f"Top symbols added by {mode} (us/step over {base}'s):", "",
                "| library | symbol | us/step |", "|---|---|---:|"]
        diff = Counter(syms_by_mode[mode])
        diff.subtract(syms_by_mode[base])
        for (lib, s), n in diff.most_common(args.symbols):
            out.append(f"| {lib} | `{s}` | {n * per:.1f} |")
        out.append("")
    if args.thread:
        out += other_thread(name, runs, modes, mapper, args, per, dump)
    return out


def other_thread(name: str, runs: dict, modes: list[str], mapper: Mapper, args, per: float,
                 dump: dict) -> list[str]:
    """The --thread thread's table: a block where it did not exist counts nothing."""
    cats_by_mode, syms_by_mode = {}, {}
    for mode in modes:
        cats_by_mode[mode], syms_by_mode[mode] = attribute(
            [pc for r in runs[mode] for pc in r.get("pcs2", [])], mapper)
    found = [m for m in modes if any("pcs2" in r for r in runs[m])]
    out = [f"### {name}: the thread named {args.thread}*", "",
           f"Sampled in the blocks of {', '.join(found) or 'no mode'} (a mode where it did not "
           "exist shows 0). Its samples span the same wall time as the main thread's.", ""]
    out += category_rows(cats_by_mode, modes, per)
    cpu = [sum(r.get("cpu2", 0.0) for r in runs[m]) / len(runs[m]) for m in modes]
    out.append("| its thread_time | " + " | ".join(f"{c * 1e6:.0f}" for c in cpu) + " |")
    out.append("")
    for mode in found:
        out += [f"Its top symbols under {mode} (us/step):", "", "| library | symbol | us/step |",
                "|---|---|---:|"]
        out += [f"| {lib} | `{s}` | {n * per:.1f} |"
                for (lib, s), n in syms_by_mode[mode].most_common(args.symbols)]
        out.append("")
    for m in modes:
        dump["models"][name][m]["thread"] = {"prefix": args.thread,
                                             "categories": dict(cats_by_mode[m]),
                                             "cpu": [r.get("cpu2", 0.0) for r in runs[m]]}
    return out


if __name__ == "__main__":
    sys.exit(main())
