"""Instructions per operator event, counted with valgrind's callgrind: deterministic on a busy or
shared machine (the same binary and inputs give the same counts), so it measures what a change
to the capture path buys where wall-clock benchmarks are noise-bound.

Each mode runs in its own process under callgrind: a small Hugging Face GPT-2 (or, without
transformers, the workloads' transformer block) trains a few steps on the CPU; the counters are
zeroed before and dumped after the measured steps (markers: os.getppid / os.getpgrp), so imports
and set-up are left out. Instructions per op = (mode - off) / operator events in those steps,
on the main thread (other threads, whose work callgrind's slowdown stretches, are shown apart).
--micro: one line at Python depth 30; --lines: 400 distinct lines there (contexts that change).

    python benchmarks/op_instructions.py                    # off, op, python,op
    python benchmarks/op_instructions.py --mode python,op,native --steps 3
    python benchmarks/op_instructions.py --lines --mode python,op --off 25439132
    python benchmarks/op_instructions.py --micro --mode python,op --mode python,op,memory
    python benchmarks/op_instructions.py --model gpt2_generate --mode op --mode python,op

A mode with the memory layer also gives its allocations in those steps, and the inclusive cost
of our allocation reporter and of torch's CPU size table around it (torch New / Delete).

--cache adds callgrind's cache simulation, with a fixed geometry (32 KiB 8-way L1 instruction
and data caches, a 512 KiB 8-way "LL" standing for a core's L2) so that counts do not depend on
what the host reports: the misses per op event an operator adds, in our code and, by evicting
their lines, in the interpreter's and torch's (a cost that instruction counts do not show).

    python benchmarks/op_instructions.py --cache --model gpt2_generate --mode python,op

--code-lines REGEX counts, for each function whose name matches (a build with symbols: see
--keep), the 64-byte lines of its own code an op event runs and the L1i misses on them: where a
function's code is spread thin (few instructions a line), a compact rewrite saves misses that
an instruction count does not show.

    python benchmarks/op_instructions.py --model gpt2_train --mode python,op --code-lines 'dc::op_enter\('
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import contextlib, gc, os, sys, tempfile, torch
torch.manual_seed(0); torch.set_num_threads(1)
mode, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
workload = os.environ.get("DC_OPI_WORKLOAD", "")
if workload.startswith("zoo:"):  # a model_zoo.py model, CPU-sized
    sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[4])))
    import model_zoo
    step, loss = model_zoo.MODELS[workload[4:]][0]("cpu", True), None
elif workload in ("micro", "lines"):
    import torch.nn.functional as F
    x, w, b = torch.ones(2, 4), torch.ones(4, 4), torch.ones(4)
    if workload == "micro":  # nested ops at Python depth 30, one line
        def leaf():
            return [F.linear(x, w, b) for _ in range(500)]
    else:  # 400 distinct lines in 8 functions at Python depth 30: torch.add (one op) and
           # F.linear (nested ops) alternate, so most events change the innermost line
        src = "".join(
            f"def part{p}(x, w, b):\n" + "".join(
                f"    y = torch.add(x, {i})\n" if i % 2 else f"    y = F.linear(x, w, b)\n"
                for i in range(50)) + "    return y\n" for p in range(8))
        src += "def leaf():\n" + "".join(f"    part{p}(x, w, b)\n" for p in range(8))
        exec(compile(src, os.path.join(tempfile.gettempdir(), "dc_opi_lines.py"), "exec"))
    def deep(k):
        return deep(k - 1) if k else leaf()
    step, loss = (lambda: deep(30)), None
else:
  try:
    import transformers
    cfg = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1024)
    model = transformers.GPT2LMHeadModel(cfg).train()
    ids = torch.randint(0, 1024, (2, 32))
    loss = lambda: model(input_ids=ids, labels=ids).loss
  except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[4])))
    import workloads
    step = workloads.build("transformer", "cpu")
    loss = None
if loss is not None:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    def step():
        opt.zero_grad(set_to_none=True)
        loss().backward()
        opt.step()
for _ in range(2):
    step()
import deepcontext
prof = (contextlib.nullcontext() if mode == "off" else
        deepcontext.profile(out, context=mode, sample_interval=0, flush_interval=1e6, force=True))
with prof:
    for i in range(steps + 2):  # one call site: the measured steps' contexts are all known
        if i == 2:
            gc.collect()        # no collection in the window: one falling inside one mode's
            gc.disable()        # window and not the other's is +-2.6M instructions (GPT-2)
            os.getppid()        # callgrind: zero the counters (first sightings are left out)
        step()
    os.getpgrp()                # callgrind: dump
"""

FUNCS = {  # inclusive cost of these, per op event
    "hook on_enter": r"on_enter\(at::RecordFunction",
    "hook on_exit": r"on_exit\(at::RecordFunction",
    "python walk": r"dc_walk_python",
    # the core's share (named only in a build that keeps its symbols: see --help)
    "core op_enter": r"dc::op_enter\(char",
    "core op_exit": r"dc::op_exit\(unsigned",
    "core scope_enter": r"dc::scope_enter\(int",  # the module layer's scopes
    # the memory layer: our reporter (all of it, the core's share included), and torch's CPU
    # allocator bookkeeping around it (its size table, then our reporter)
    "memory reporter": r"MemoryReporter::reportMemoryUsage\(void",
    "torch New": r"c10::ProfiledCPUMemoryReporter::New\(",
    "torch Delete": r"c10::ProfiledCPUMemoryReporter::Delete\(",
}


CACHE = ["--cache-sim=yes", "--I1=32768,8,64", "--D1=32768,8,64", "--LL=524288,8,64"]
MISSES = ("I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")  # callgrind's names, in its order


def _counts(prefix: str) -> list[int]:
    """The event counts at the start of a callgrind_annotate line ('.' is zero)."""
    cleaned = re.sub(r"\([\s\d.]+%\)", " ", prefix)
    return [0 if t == "." else int(t.replace(",", "")) for t in cleaned.split()]


def code_lines(dump: Path, ops: float, pattern: str) -> list[str]:
    """Per function matching `pattern`: its own instructions and L1i misses an op event, the
    64-byte lines of its code that ran, and those run by at least half the events."""
    names: dict[str, str] = {}
    per_fn: dict[str, dict[int, list[int]]] = {}
    addr, skip, npos, ir, i1, wanted = 0, False, 1, 0, None, ""  # wanted: a matching fn's name
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("positions:"):
            npos = len(line.split()) - 1
        elif line.startswith("events:"):
            events = line.split()[1:]
            ir, i1 = events.index("Ir"), events.index("I1mr") if "I1mr" in events else None
        elif line.startswith(("fn=", "cfn=")):  # "(id) name" the first time, "(id)" after
            m = re.match(r"\((\d+)\)(?: (.*))?", line.split("=", 1)[1])
            if m and m.group(2):
                names[m.group(1)] = m.group(2)
            if line.startswith("fn=") and m:  # (matched once per function block, not per line)
                fn = names.get(m.group(1), "")
                wanted = fn if fn and re.search(pattern, fn) else ""
        elif line.startswith("calls="):
            skip = True  # the next cost line is the call's inclusive cost, not this code's
        elif line and line[0] in "+-*0123456789":
            tok = line.split()
            a = tok[0]
            addr = (addr if a == "*" else addr + int(a[1:], 0) if a[0] == "+"
                    else addr - int(a[1:], 0) if a[0] == "-" else int(a, 0))
            if skip:
                skip = False
                continue
            if wanted:
                vals = [int(v) for v in tok[npos:]] + [0] * 16
                cost = per_fn.setdefault(wanted, {}).setdefault(addr, [0, 0])
                cost[0] += vals[ir]
                cost[1] += vals[i1] if i1 is not None else 0
    out = []
    for name, costs in sorted(per_fn.items(), key=lambda kv: -sum(c[1] for c in kv[1].values())):
        lines: dict[int, list[int]] = {}
        for a, (n, m) in costs.items():  # (a line ran as often as its most-run instruction)
            ln = lines.setdefault(a // 64, [0, 0])
            ln[0], ln[1] = max(ln[0], n), ln[1] + m
        hot = sum(1 for n, _ in lines.values() if n >= ops / 2)
        out.append(f"  {name[:90]}: {sum(c[0] for c in costs.values()) / ops:.0f} instructions, "
                   f"{sum(c[1] for c in costs.values()) / ops:.1f} L1i misses an op event (own code); "
                   f"{len(lines)} lines ran, {hot} of them for at least half the events")
    return out


def run(mode: str, steps: int, tmp: Path, cache: bool = False, code: str | None = None) -> dict:
    # "python,op%op-empty-callbacks": DEEPCONTEXT_OP_DIAG=empty-callbacks (bindings/core.cpp),
    # the hook with every operator event returning at once: RecordFunction's own cost;
    # "%op-no-prefetch": the events' lookups not fetched ahead (ops.cpp); "%op-keep-wrappers":
    # the autograd engine's evaluate_function wrappers recorded (torch_hook.cpp)
    mode, _, diag = mode.partition("%")
    name = mode.replace(",", "_") + (f"_{diag}" if diag else "")
    out = tmp / f"{name}.dcprof"
    script = tmp / "child.py"
    script.write_text(CHILD)
    cg = tmp / f"cg.{name}"
    for old in tmp.glob(f"{cg.name}.*"):
        old.unlink()
    cmd = ["valgrind", "--tool=callgrind", *(CACHE if cache else []),
           *(["--dump-instr=yes"] if code and mode != "off" else []), f"--callgrind-out-file={cg}.%p",
           "--zero-before=getppid", "--dump-before=getpgrp", sys.executable, str(script), mode,
           str(steps), str(out), __file__]
    # One thread each for every BLAS and OpenMP pool: an idle pool's threads spin for a while
    # after each use, which callgrind counts by wall time (numpy's OpenBLAS: 20-60M instructions
    # in the micro's window), not by work done.
    one = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    env = {**os.environ, "PYTHONHASHSEED": "0", **one}
    env.pop("DEEPCONTEXT_OP_DIAG", None)
    if diag.startswith("op-"):
        env["DEEPCONTEXT_OP_DIAG"] = diag[3:]
    subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    (dump,) = [p for p in tmp.glob(f"{cg.name}.*.1")]
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
                         capture_output=True, text=True, check=True).stdout
    events = re.search(r"^Events shown:\s+(.*)$", ann, re.M).group(1).split()
    totals = _counts(re.search(r"^(.*)PROGRAM TOTALS", ann, re.M).group(1))
    # Other threads (the profiler's drains, the program's own threads) run by wall time, which
    # callgrind stretches ~50x: counted apart, so the main thread's count stays exact.
    m = re.search(r"^(\s*[\d,]+ \(.*?)\S*:start_thread ", ann, re.M)
    in_threads = _counts(m.group(1)) if m else [0] * len(totals)
    main_thread = dict(zip(events, (t - o for t, o in zip(totals, in_threads))))
    res: dict = {"total": main_thread["Ir"], "threads": in_threads[0], "ops": 0.0,
                 "misses": {k: main_thread[k] for k in MISSES if k in main_thread}}
    for label, pat in FUNCS.items():
        m = re.search(r"^\s*([\d,]+) \([\s\d.]+%\)\s+.*" + pat, ann, re.M)
        res[label] = int(m.group(1).replace(",", "")) if m else 0
    if mode != "off":
        import deepcontext
        prof = deepcontext.load(out)
        res["ops"] = prof.total("op.count") * steps / (steps + 2)
        res["allocs"] = prof.total("mem.alloc.count") * steps / (steps + 2)
        res["code"] = code_lines(dump, res["ops"], code) if code and res["ops"] else []
    return res


def _zoo_models() -> list[str]:
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import model_zoo
    except ImportError:  # (torch missing: the option lists nothing)
        return []
    return list(model_zoo.MODELS)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", action="append", help="context spec, repeatable (default op; python,op)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--micro", action="store_true",
                   help="500 F.linear calls from one line at Python depth 30 per step instead of GPT-2")
    p.add_argument("--lines", action="store_true",
                   help="400 distinct lines (torch.add and F.linear) at Python depth 30 per step")
    p.add_argument("--model", help="a model_zoo.py model at its CPU size (--small) instead of GPT-2")
    p.add_argument("--keep", metavar="DIR",
                   help="keep the callgrind files there (for callgrind_annotate; a build with "
                        "symbols: pip install . -Ccmake.build-type=RelWithDebInfo)")
    p.add_argument("--cache", action="store_true",
                   help="also simulate the caches: misses per op event (slower, ~2x)")
    p.add_argument("--code-lines", metavar="REGEX",
                   help="per function matching REGEX: the 64-byte lines of its own code an op "
                        "event runs, and their L1i misses (implies --cache; a build with symbols)")
    p.add_argument("--off", type=int, metavar="INSTRUCTIONS",
                   help="the unprofiled count of an earlier run (same workload and steps), "
                        "instead of measuring it again")
    args = p.parse_args()
    if args.model and args.model not in _zoo_models():  # (looked up only when asked: torch)
        p.error(f"--model: no model {args.model!r} in model_zoo.py ({', '.join(_zoo_models())})")
    modes = args.mode or ["op", "python,op"]
    args.cache = args.cache or bool(args.code_lines)
    if args.cache and args.off:
        p.error("--cache: the unprofiled run's misses are measured again (leave out --off)")
    from models import OP_SWITCHES  # (torch: imported only once the arguments are read)

    for mode in modes:  # (before the unprofiled run, which takes minutes)
        if mode.partition("%")[2] not in ("", *OP_SWITCHES):
            p.error(f"--mode {mode}: the switches here are %{', %'.join(OP_SWITCHES)}")
    if "off" in modes:  # (a profiled mode with no events would divide by zero below)
        p.error("--mode off: the unprofiled run is always made first (or given with --off)")
    if args.micro or args.lines:
        os.environ["DC_OPI_WORKLOAD"] = "micro" if args.micro else "lines"
    elif args.model:
        os.environ["DC_OPI_WORKLOAD"] = f"zoo:{args.model}"
    with tempfile.TemporaryDirectory(prefix="dc-cg-") as d:
        tmp = Path(args.keep or d)
        tmp.mkdir(parents=True, exist_ok=True)
        off = {"total": args.off} if args.off else run("off", args.steps, tmp, args.cache)
        print(f"off: {off['total']:,} main-thread instructions in {args.steps} steps")
        events = 0.0
        for mode in modes:
            r = run(mode, args.steps, tmp, args.cache, args.code_lines)
            if r["ops"] == 0:  # (%op-empty-callbacks records none: the events of the mode before)
                if events == 0:
                    p.error(f"--mode {mode}: no op events recorded; list a mode that records "
                            "them first (the same steps run the same operators)")
                r["ops"] = events
            events = r["ops"]
            per = (r["total"] - off["total"]) / r["ops"]
            parts = ", ".join(f"{k} {r[k] / r['ops']:.0f}" for k in FUNCS if r[k])
            allocs = f", {r['allocs']:.0f} allocations" if r["allocs"] else ""
            print(f"{mode}: +{(r['total'] / off['total'] - 1) * 100:.1f}% main-thread instructions, "
                  f"{r['ops']:.0f} op events{allocs}, +{per:.0f} instructions per op ({parts}; "
                  f"other threads {r['threads'] / r['ops']:.0f} per op)")
            if args.cache:
                print(f"{mode}: cache misses per op event (main thread, over off): " + ", ".join(
                    f"{k} {(r['misses'][k] - off['misses'][k]) / r['ops']:+.1f} "
                    f"({r['misses'][k] / off['misses'][k] - 1:+.1%})" for k in MISSES))
            if r["code"]:
                print(f"{mode}: own code of the functions matching {args.code_lines!r}:", *r["code"], sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
