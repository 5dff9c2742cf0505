"""Where each capture mode's cost goes, by library and symbol, seen from outside the process:
Linux ``perf record`` samples every thread on the kernel's cpu-clock timer (no signal reaches
the program, so unlike where.py's in-process 10 kHz timer, which made GPT-2 generate's step
1.8x slower on the 2-core VM, it leaves the step as it is), while unprofiled and profiled blocks
alternate in one process; each sample is credited to the block it fell in by its
CLOCK_MONOTONIC time. Rows are the main thread's milliseconds per step in each library or
symbol, the profiler's own threads in one row; the last column is the profiled block's minus
the first mode's, which holds the indirect costs too (a library that runs slower because the
profiler evicted its data from the caches).

    python benchmarks/perf_blocks.py --small --models gpt2_generate --rounds 8 --steps 25
    python benchmarks/perf_blocks.py --small --models gpt2_train --mode off --mode op --symbols 40
    python benchmarks/perf_blocks.py --small --mode 'python,op,gpu%op-empty-callbacks' \
        --mode python,op,gpu     # deepcontext's own work above RecordFunction's (models.py's floor)
    python benchmarks/perf_blocks.py --small --annotate dc::detail::chain_nodes  # where it waits

Needs ``perf`` (linux-tools) allowed to sample this user's processes (perf_event_paranoid <= 2;
the kernel's own rows need <= 1 or root).
"""

from __future__ import annotations

import argparse
import bisect
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: The row of every thread but the main one: the profiler's (its sampler and flusher) and the
#: program's (torch's intra-op workers, which spin while they wait for work).
OTHERS = "(other threads: the profiler's, torch's workers)"


def child(args: argparse.Namespace) -> int:
    """The workload, in alternating blocks; one line per block: mode, start, end, CPU ms/step."""
    import torch

    import deepcontext
    import model_zoo
    from models import set_diag

    if args.threads:
        torch.set_num_threads(args.threads)
    step = model_zoo.MODELS[args.models][0](args.device, args.small)
    for _ in range(5):
        step()
    out = Path(tempfile.mkdtemp(prefix="dc-perf-blocks-")) / "p.dcprof"
    with open(args.child, "w") as log:
        def block(mode: str) -> None:
            t0, c0 = time.monotonic(), time.thread_time()
            for _ in range(args.steps):
                step()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            t1, c1 = time.monotonic(), time.thread_time()
            log.write(f"{mode} {t0} {t1} {(c1 - c0) / args.steps * 1e3:.4f}\n")

        for r in range(args.rounds):
            k = r % len(args.mode)
            for mode in args.mode[k:] + args.mode[:k]:
                if mode == "off":
                    block(mode)
                    continue
                spec, _, diag = mode.partition("%")  # "%op-empty-callbacks": models.py's switch
                set_diag(diag)
                context, _, interval = spec.partition("@")
                kw = {"sample_interval": float(interval)} if interval else {}
                with deepcontext.profile(output=out, context=context, force=True,
                                         flush_interval=args.flush_interval, **kw) as prof:
                    step()
                    prof.step()
                    block(mode)
    shutil.rmtree(out.parent, ignore_errors=True)
    return 0


def samples(data: Path) -> list[tuple[int, float, str, str]]:
    """(tid, time, symbol, library) of every sample in a perf.data."""
    text = subprocess.run(["perf", "script", "-i", str(data), "-F", "tid,time,ip,sym,dso",
                           "--ns"], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in text.splitlines():
        head, sep, rest = line.partition(": ")
        if not sep:
            continue
        tid, when = head.split()
        ip_sym, _, dso = rest.strip().rpartition(" (")
        sym = ip_sym.split(None, 1)[1] if " " in ip_sym.strip() else "[unknown]"
        if not sym.startswith("("):
            sym = sym.split("(")[0]  # demangled arguments off: one row per function
        rows.append((int(tid), float(when.rstrip(":")), sym, Path(dso.rstrip(")")).name))
    return rows


def annotate(data: Path, symbol: str, least: float) -> list[str]:
    """The instructions of `symbol` that hold at least `least` % of its samples (all blocks),
    each under the source line it was compiled from: where a function waits (a build with
    symbols: pip install . -Ccmake.build-type=RelWithDebInfo). With timer sampling a stalled
    instruction's samples land on the one after it (a compare's load: on its branch)."""
    text = subprocess.run(["perf", "annotate", "-i", str(data), "--stdio", "-s", symbol],
                          capture_output=True, text=True).stdout
    head = next((ln for ln in text.splitlines() if "Percent" in ln), None)
    if head is None:
        return [f"`{symbol}`: no samples (or no such symbol)", ""]
    n = head.rpartition("(")[2].split()[0]
    out = [f"`{symbol}` ({n} samples, all blocks):", "",
           "| % | address | instruction | source line before it |", "|---:|---|---|---|"]
    source = ""
    for line in text.splitlines():
        pct, sep, rest = line.partition(" : ")
        if not sep:
            continue
        if not pct.strip():  # a source line: ": <line number>   <text>"
            number, _, code = rest.strip().partition(" ")
            code = code.strip()
            # (an inlined function's name, "ns::f(args) const:", is no source line)
            if number.isdigit() and code and not (code.endswith(":") and "(" in code):
                source = code
            continue
        addr, _, instr = rest.strip().partition(":")
        try:
            share = float(pct)
        except ValueError:
            continue
        if share >= least:
            instr = " ".join(instr.split()).split(" <")[0]
            out.append(f"| {share:.1f} | {addr} | `{instr}` | `{source[:70]}` |")
    return out + [""]


def table(blocks: list[list[str]], rows, modes: list[str], steps: int, freq: int, by: str,
          top: int) -> list[str]:
    spans = sorted((float(b[1]), float(b[2]), b[0]) for b in blocks)
    starts = [s[0] for s in spans]
    count = {m: Counter() for m in modes}
    per_thread = Counter(r[0] for r in rows)
    main = per_thread.most_common(1)[0][0]
    for tid, when, sym, dso in rows:
        i = bisect.bisect_right(starts, when) - 1
        if i < 0 or when > spans[i][1]:
            continue  # set-up, warm-up, a session's first step: outside every timed block
        key = dso if by == "dso" else f"{sym[-60:]} ({dso[:24]})"
        count[spans[i][2]][key if tid == main else OTHERS] += 1
    n_blocks = Counter(b[0] for b in blocks)
    scale = {m: 1e3 / freq / (n_blocks[m] * steps) for m in modes}

    def ms(m: str, k: str) -> float:
        return count[m][k] * scale[m]

    base, last = modes[0], modes[-1]
    head = "| ms/step | " + " | ".join(modes) + f" | {last} - {base} |"
    out = [head, "|---|" + "---:|" * (len(modes) + 1)]
    main_rows = {m: sum(v for k, v in count[m].items() if k != OTHERS) * scale[m]
                 for m in modes}
    cpu = {m: sum(float(b[3]) for b in blocks if b[0] == m) / n_blocks[m] for m in modes}
    out.append("| **main thread, sampled** | " + " | ".join(f"{main_rows[m]:.2f}" for m in modes)
               + f" | {main_rows[last] - main_rows[base]:+.2f} |")
    out.append("| main thread, thread_time | " + " | ".join(f"{cpu[m]:.2f}" for m in modes)
               + f" | {cpu[last] - cpu[base]:+.2f} |")
    keys = set().union(*count.values())
    for k in sorted(keys, key=lambda k: -abs(ms(last, k) - ms(base, k)))[:top]:
        out.append(f"| {k} | " + " | ".join(f"{ms(m, k):.3f}" for m in modes)
                   + f" | {ms(last, k) - ms(base, k):+.3f} |")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--models", default="gpt2_generate", help="comma list from model_zoo.MODELS")
    p.add_argument("--mode", action="append",
                   help="off or a context[@interval][%%SWITCH: models.OP_SWITCHES]; "
                        "repeatable (default: off, python,op,gpu); the first is the baseline")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--steps", type=int, default=25, help="steps a block")
    p.add_argument("--small", action="store_true", help="the models' CPU sizes")
    p.add_argument("--threads", type=int, help="torch.set_num_threads")
    p.add_argument("--freq", type=int, default=4000, help="perf's samples a second")
    p.add_argument("--flush-interval", type=float, default=0.5)
    p.add_argument("--symbols", type=int, default=30, help="symbol rows shown")
    p.add_argument("--annotate", action="append", default=[], metavar="SYMBOL",
                   help="also the instructions of this symbol (as perf names it, e.g. "
                        "dc::detail::chain_nodes) holding most of its samples; repeatable")
    p.add_argument("--markdown")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.mode = args.mode or ["off", "python,op,gpu"]
    sys.path.insert(0, str(HERE))
    from models import OP_SWITCHES

    for m in args.mode:
        if m.partition("%")[2] not in ("", *OP_SWITCHES):
            p.error(f"--mode {m}: the switches here are %{', %'.join(OP_SWITCHES)}")
    if args.child:
        return child(args)
    import model_zoo

    unknown = [m for m in args.models.split(",") if m not in model_zoo.MODELS]
    if unknown:
        raise SystemExit(f"perf_blocks.py: unknown model {unknown[0]!r} "
                         f"(known: {', '.join(model_zoo.MODELS)})")
    if shutil.which("perf") is None:
        raise SystemExit("perf_blocks.py: needs Linux perf (linux-tools) on PATH")
    lines = [f"# perf_blocks: {args.device}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             "", f"Command: `{shlex.join(['python', *sys.argv])}`", "",
             f"- {args.rounds} rounds of one {args.steps}-step block per mode, rotated; perf "
             f"cpu-clock at {args.freq} Hz; flushes every {args.flush_interval} s", ""]
    with tempfile.TemporaryDirectory(prefix="dc-perf-blocks-") as d:
        for name in args.models.split(","):
            data, spans = Path(d) / f"{name}.data", Path(d) / f"{name}.blocks"
            cmd = ["perf", "record", "-q", "-k", "mono", "-e", "cpu-clock", "-F", str(args.freq),
                   "-o", str(data), "--", sys.executable, __file__, "--child", str(spans),
                   "--models", name, "--device", args.device, "--rounds", str(args.rounds),
                   "--steps", str(args.steps), "--flush-interval", str(args.flush_interval)]
            cmd += ["--small"] if args.small else []
            cmd += ["--threads", str(args.threads)] if args.threads else []
            for m in args.mode:
                cmd += ["--mode", m]
            if subprocess.run(cmd).returncode != 0 or not spans.exists():
                lines += [f"## {name}: the run failed", ""]
                continue
            blocks = [ln.split() for ln in spans.read_text().splitlines()]
            rows = samples(data)
            lines += [f"## {name}", "", "By library:", ""]
            lines += table(blocks, rows, args.mode, args.steps, args.freq, "dso", 25)
            lines += ["", "By symbol (largest differences):", ""]
            lines += table(blocks, rows, args.mode, args.steps, args.freq, "sym", args.symbols)
            lines.append("")
            for symbol in args.annotate:
                lines += annotate(data, symbol, 2.0)
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
