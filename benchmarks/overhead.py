"""DeepContext's overhead benchmark: the same workloads in one process, unprofiled, under
deepcontext and under torch.profiler, alternating in round-robin repeats; plus profile size and
extra RSS after 100 vs 1,000 steps. See benchmarks/README.md for what each number means.

    python benchmarks/overhead.py --device cpu --threads 1 --markdown benchmarks/results/cpu-DATE.md
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import workloads

import deepcontext


@dataclass
class Mode:
    """One way of running a workload: ``off``, ``torch``, or deepcontext with a context spec."""

    kind: str                      # "off" | "dc" | "torch"
    context: str = ""
    sample_interval: float | None = None

    @property
    def label(self) -> str:
        if self.kind != "dc":
            return self.kind
        interval = "" if self.sample_interval is None else f"@{self.sample_interval:g}"
        return f"dc[{self.context}{interval}]"

    @classmethod
    def parse_dc(cls, spec: str) -> Mode:
        context, _, interval = spec.partition("@")
        return cls("dc", context, float(interval) if interval else None)


@dataclass
class Run:
    """One timed run: mean wall and process-CPU seconds per step, output size in bytes, extra
    host RSS in bytes."""

    step_s: float
    cpu_s: float
    size: int = 0
    extra_rss: int = 0
    gpu_time_s: float | None = None
    nodes: int = 0
    notes: list[str] = field(default_factory=list)


_libc = ctypes.CDLL(None) if sys.platform.startswith("linux") else None


def rss() -> int:
    """Resident set size of this process now, after returning freed heap to the OS."""
    gc.collect()
    if _libc is not None and hasattr(_libc, "malloc_trim"):
        _libc.malloc_trim(0)  # so RSS deltas are not hidden by free heap an earlier run left
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed_steps(step: Callable[[], None], steps: int, device: str,
                tick: Callable[[], None]) -> tuple[float, float]:
    """Mean (wall, process CPU) seconds per step, the device synchronized at both ends."""
    sync(device)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
        tick()
    sync(device)
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


def run_mode(mode: Mode, step: Callable[[], None], steps: int, warmup: int, device: str,
             tmp: Path) -> Run:
    """Run ``warmup`` untimed then ``steps`` timed steps of ``step`` under ``mode``."""
    before = rss()
    if mode.kind == "off":
        timed_steps(step, warmup, device, lambda: None)
        return Run(*timed_steps(step, steps, device, lambda: None), extra_rss=rss() - before)
    out = tmp / f"{os.getpid()}-{time.monotonic_ns()}"
    if mode.kind == "dc":
        kwargs = {} if mode.sample_interval is None else {"sample_interval": mode.sample_interval}
        context, _, extras = mode.context.partition("+")  # --dc python,op,gpu+perf: CPU counters
        kwargs["perf"] = "perf" in extras.split("+")
        with deepcontext.profile(output=out, context=context, force=True, **kwargs) as prof:
            timed_steps(step, warmup, device, prof.step)
            times = timed_steps(step, steps, device, prof.step)
            inside = rss()
        tree = deepcontext.load(out)
        gpu = tree.total("gpu.time") if "gpu" in mode.context else None
        run = Run(*times, size=out.stat().st_size, extra_rss=max(inside, rss()) - before,
                  gpu_time_s=gpu, nodes=len(tree), notes=list(tree.metadata.get("notes", [])))
    else:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.startswith("cuda"):
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            timed_steps(step, warmup, device, prof.step)
            times = timed_steps(step, steps, device, prof.step)
            inside = rss()
        prof.export_chrome_trace(str(out))
        run = Run(*times, size=out.stat().st_size, extra_rss=max(inside, rss()) - before)
        del prof
    out.unlink(missing_ok=True)
    return run


def benchmark(names: list[str], phases: list[list[Mode]], args: argparse.Namespace, tmp: Path,
              before_torch_phase: Callable[[], None]) -> dict:
    """A pristine unprofiled pass (see README), then per phase and workload, round-robin
    repeats of the phase's modes. Runs of the same mode in several phases are pooled.
    ``before_torch_phase`` runs once, before a phase of torch runs alone (``--torch-last``),
    else at the end."""
    steps = {name: workloads.build(name, args.device) for name in names}
    runs: dict[str, dict[str, list[Run]]] = {name: {} for name in names}
    for name in names:  # before any deepcontext session installs its (then idle) op hook
        for _ in range(args.repeats):
            runs[name].setdefault("off (pristine)", []).append(
                run_mode(Mode("off"), steps[name], args.steps, args.warmup, args.device, tmp))
    for modes in phases:
        if len(phases) > 1 and Mode("torch") in modes:
            before_torch_phase()
        for name in names:
            for r in range(args.repeats):
                for mode in modes[r % len(modes):] + modes[:r % len(modes)]:  # rotate: no order bias
                    run = run_mode(mode, steps[name], args.steps, args.warmup, args.device, tmp)
                    runs[name].setdefault(mode.label, []).append(run)
                    print(f"  {name:12s} repeat {r + 1}/{args.repeats} {mode.label:22s} "
                          f"{run.step_s * 1e3:9.2f} ms/step {run.cpu_s * 1e3:9.2f} CPU ms/step",
                          file=sys.stderr, flush=True)
                    for note in run.notes:
                        print(f"    note: {note}", file=sys.stderr)
    if len(phases) == 1:
        before_torch_phase()
    return runs


def growth(name: str, mode: Mode, counts: list[int], args: argparse.Namespace, tmp: Path) -> list[dict]:
    """Profile size and extra RSS of one deepcontext session per step count."""
    step = workloads.build(name, args.device)
    run_mode(mode, step, args.warmup, args.warmup, args.device, tmp)  # one-time costs, discarded
    rows = []
    for count in counts:
        run = run_mode(mode, step, count, args.warmup, args.device, tmp)
        rows.append({"workload": name, "mode": mode.label, "steps": count, "size": run.size,
                     "extra_rss": run.extra_rss, "step_s": run.step_s, "nodes": run.nodes})
        print(f"  growth {name} {count} steps: {run.size} B, +{run.extra_rss / 2**20:.1f} MiB RSS",
              file=sys.stderr, flush=True)
    return rows


def summarize(runs: dict[str, dict[str, list[Run]]]) -> list[dict]:
    """Per (workload, mode): median wall and CPU step times, their ratios to ``off`` and to the
    pristine pass, median profile size and extra RSS."""
    rows = []
    for name, by_mode in runs.items():
        wall0 = statistics.median(r.step_s for r in by_mode["off"])
        cpu0 = statistics.median(r.cpu_s for r in by_mode["off"])
        cpu_pristine = statistics.median(r.cpu_s for r in by_mode["off (pristine)"])
        for label, rs in by_mode.items():
            wall, cpu = statistics.median(r.step_s for r in rs), statistics.median(r.cpu_s for r in rs)
            gpu = [r.gpu_time_s for r in rs if r.gpu_time_s is not None]
            rows.append({"workload": name, "mode": label, "step_ms": wall * 1e3, "ratio": wall / wall0,
                         "ratio_min": min(r.step_s for r in rs) / wall0,
                         "ratio_max": max(r.step_s for r in rs) / wall0,
                         "cpu_ms": cpu * 1e3, "cpu_ratio": cpu / cpu0,
                         "cpu_ratio_pristine": cpu / cpu_pristine,
                         "size": statistics.median(r.size for r in rs),
                         "extra_rss": statistics.median(r.extra_rss for r in rs),
                         "gpu_time_s": statistics.median(gpu) if gpu else None,
                         "notes": sorted({n for r in rs for n in r.notes})})
    return rows


def mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB" if abs(n) >= 2**20 else f"{n / 2**10:.0f} KiB"


def _cpuinfo(name: str) -> str:
    with open("/proc/cpuinfo") as f:
        return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith(name)), "")


def cpu_has_bf16() -> bool:
    """Whether this CPU has bf16 instructions (without them a bf16 matmul takes a slow path, ~50x
    fp32's on an AVX2-only EPYC, which changes what a bf16 training step is made of)."""
    return any(f in _cpuinfo("flags").split() for f in ("avx512_bf16", "amx_bf16"))


def machine() -> list[str]:
    cpu = _cpuinfo("model name") or platform.processor()
    bf16 = cpu_has_bf16()
    lines = [f"nproc: {os.cpu_count()} (affinity {len(os.sched_getaffinity(0))}), CPU: {cpu} "
             f"(torch's CPU kernels: {torch.backends.cpu.get_cpu_capability()}, "
             f"bf16 instructions: {'yes' if bf16 else 'no'})",
             (f"python {platform.python_version()}, torch {torch.__version__} "
              f"(threads {torch.get_num_threads()}), deepcontext {deepcontext.__version__}")]
    if torch.cuda.is_available():
        lines.append(f"GPU: {torch.cuda.get_device_name()}")
    # (an unoptimized hook once cost ~1,700 more instructions an event unseen: 50653bb)
    from deepcontext.capture.torch_ops import built_hook_flags
    flags = built_hook_flags(torch)
    lines.append(f"torch hook built with: {' '.join(flags) if flags else '(not built)'}")
    try:  # which capture code was measured: the checkout's commit, and whether it had local edits
        git = ["git", "-C", str(Path(__file__).resolve().parent)]
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=False).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "../src", "../csrc"],
                               capture_output=True, text=True, check=False).stdout.strip()
        if head:
            lines.append(f"commit {head}" + (" with uncommitted edits in src/ or csrc/" if dirty else ""))
    except OSError:
        pass
    return lines


def markdown(rows: list[dict], growth_rows: list[dict], args: argparse.Namespace) -> str:
    out = [f"# DeepContext overhead, {args.device}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
           f"Command: `{args.command}`", ""]
    out += [f"- {line}" for line in machine()]
    out += [(f"- {args.steps} timed steps after {args.warmup} warm-up steps per run, "
             f"{args.repeats} round-robin repeats; medians."), "",
            ("| workload | mode | wall ms/step | wall x off | range | CPU ms/step | CPU x off "
             "| CPU x pristine | profile/trace | extra RSS |"),
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        size = mib(r["size"]) if r["size"] else "-"
        out.append(f"| {r['workload']} | {r['mode']} | {r['step_ms']:.2f} | {r['ratio']:.3f} | "
                   f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f} | {r['cpu_ms']:.2f} | "
                   f"{r['cpu_ratio']:.3f} | {r['cpu_ratio_pristine']:.3f} | {size} | "
                   f"{mib(r['extra_rss'])} |")
    gpu_rows = [r for r in rows if r["gpu_time_s"] is not None]
    if gpu_rows:  # 0 here means deepcontext captured no kernels in that mode: see the notes
        out += ["", "GPU time in the deepcontext profiles (all steps of a run, median over repeats):", ""]
        out += [f"- {r['workload']} {r['mode']}: {r['gpu_time_s']:.3f} s" for r in gpu_rows]
    notes = sorted({(r["mode"], n) for r in rows for n in r["notes"]})
    if notes:
        out += ["", "Notes in the deepcontext profiles:", ""] + [f"- {m}: {n}" for m, n in notes]
    if growth_rows:
        out += ["", "Growth (one deepcontext session per step count):", "",
                "| workload | mode | steps | profile | tree nodes | extra RSS | ms/step |",
                "|---|---|---:|---:|---:|---:|---:|"]
        out += [f"| {g['workload']} | {g['mode']} | {g['steps']} | {mib(g['size'])} | {g['nodes']} | "
                f"{mib(g['extra_rss'])} | {g['step_s'] * 1e3:.2f} |" for g in growth_rows]
    return "\n".join(out) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--workloads", help="comma list from: " + ",".join(workloads.WORKLOADS)
                   + " (default: the device's set)")
    p.add_argument("--steps", type=int, default=50, help="timed steps per run (default 50)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps before each run (default 10)")
    p.add_argument("--repeats", type=int, default=5, help="round-robin repeats (default 5)")
    p.add_argument("--dc", action="append", metavar="CONTEXT[@INTERVAL]",
                   help="a deepcontext variant, repeatable, e.g. python,op or python,op@0 "
                        "(sample interval 0 = no CPU sampler); default python,op (+gpu on cuda)")
    p.add_argument("--no-torch", action="store_true", help="skip the torch.profiler mode")
    p.add_argument("--torch-last", action="store_true",
                   help="run torch.profiler (alternating with off) only after every deepcontext run, "
                        "in case its CUPTI use keeps deepcontext's GPU capture off")
    p.add_argument("--growth", help="workload for the 100 vs 1,000 steps test ('none' to skip)")
    p.add_argument("--growth-steps", default="100,1000", help="step counts (default 100,1000)")
    p.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--json", help="write every run's numbers here")
    p.add_argument("--markdown", help="write the results table (with command and machine) here")
    args = p.parse_args()
    args.command = shlex.join(["python", *sys.argv])
    kind = "cuda" if args.device.startswith("cuda") else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but torch sees no CUDA device")
    if args.threads:
        torch.set_num_threads(args.threads)
    names = args.workloads.split(",") if args.workloads else workloads.DEFAULTS[kind]
    growth_name = args.growth or {"cpu": "mlp", "cuda": "gpt"}[kind]
    unknown = [n for n in [*names, growth_name] if n not in [*workloads.WORKLOADS, "none"]]
    if unknown:
        p.error(f"unknown workload {unknown[0]!r}")
    dc_modes = [Mode.parse_dc(s) for s in (args.dc or ["python,op,gpu" if kind == "cuda" else "python,op"])]
    modes = [Mode("off"), *dc_modes] + ([] if args.no_torch else [Mode("torch")])
    if args.torch_last and not args.no_torch:  # every deepcontext run before the first torch one
        phases = [modes[:-1], [Mode("off"), Mode("torch")]]
    else:
        phases = [modes]
    with tempfile.TemporaryDirectory(prefix="dc-bench-") as tmpdir:
        counts = [int(c) for c in args.growth_steps.split(",")]
        growth_rows: list[dict] = []

        def run_growth() -> None:  # before any torch.profiler run when --torch-last (CUPTI)
            if growth_name != "none":
                growth_rows.extend(growth(growth_name, dc_modes[0], counts, args, Path(tmpdir)))
        runs = benchmark(names, phases, args, Path(tmpdir), run_growth)
        rows = summarize(runs)
    text = markdown(rows, growth_rows, args)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        raw = {n: {m: [asdict(r) for r in rs] for m, rs in by.items()} for n, by in runs.items()}
        Path(args.json).write_text(json.dumps({"command": args.command, "machine": machine(),
                                               "summary": rows, "growth": growth_rows, "runs": raw},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
