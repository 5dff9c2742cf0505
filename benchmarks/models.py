"""Overhead on third-party models (model_zoo.py), measured in paired blocks: in every round, each
model runs one block of steps unprofiled and one under each profiler mode, in rotated order, and
each mode's ratio is taken against the unprofiled block *of the same round*; the table gives the
median of those paired ratios over rounds, for wall time and for the CPU time of the threads that
run a step (the main thread and torch's autograd threads; the steadier measure on a shared
machine), with the main thread's alone beside it. torch.profiler runs last, in its own rounds
paired the same way, because once Kineto holds CUPTI deepcontext's GPU capture stays off in that
process.

    python benchmarks/models.py --device cuda --rounds 8 --markdown benchmarks/results/h200-DATE-models.md
    python benchmarks/models.py --device cpu --small --models gpt2_train,bert_train --rounds 8

Pristine blocks (before the first deepcontext session installs its idle operator hook) run first;
``off x pristine`` says what the idle hook costs. Sessions flush every 0.5 s: a block shorter
than that (ten CPU-sized training steps take ~0.1 s) holds no periodic flush, and the report
says how many each block held. ``+flushSECONDS`` sets a mode's interval (``+flush0.05`` puts
about two in a 0.1 s block), which measures what a flush costs the step beside the same mode
without it (cpu-2026-12-06-flush-*.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import model_zoo
import threads
import torch
from overhead import cpu_has_bf16, machine, mib

import deepcontext

DEFAULT_MODES = ["python,op,gpu", "op", "gpu", "python", "python,op,native,gpu"]


def sync(dev: str) -> None:
    if dev.startswith("cuda"):
        torch.cuda.synchronize()


AUTOGRAD_THREADS: set[str] = set()  # the names step_threads() found


def step_threads() -> list[int]:
    """The threads that run a step: this one and torch's autograd workers (``pt_autograd_N``: on a
    GPU, backward runs there while this thread waits, so its CPU time alone misses backward)."""
    workers = threads.named("pt_autograd")
    AUTOGRAD_THREADS.update(name for _, name in workers)
    return [threading.get_native_id(), *(tid for tid, _ in workers)]


def block(step, n: int, dev: str, tick=lambda: None) -> tuple[float, float, float]:
    """Wall, step-threads' CPU and main-thread CPU seconds per step over n steps, the device
    synced at both ends."""
    tids = step_threads()
    sync(dev)
    t0, c0 = time.perf_counter(), [threads.cpu_seconds(t) for t in tids]
    for _ in range(n):
        step()
        tick()
    sync(dev)
    wall = time.perf_counter() - t0
    used = [threads.cpu_seconds(t) - c for t, c in zip(tids, c0)]
    return wall / n, sum(used) / n, used[0] / n


#: The core's operator-layer switches (bindings/core.cpp, DEEPCONTEXT_OP_DIAG): every event
#: returning at once (RecordFunction's own floor), or its lookups not fetched ahead.
OP_SWITCHES = ("op-empty-callbacks", "op-no-prefetch", "op-keep-wrappers")


def set_diag(diag: str) -> None:
    """A mode's measuring switch, read by the core at each session's start: "op-..." sets
    DEEPCONTEXT_OP_DIAG, anything else DEEPCONTEXT_GPU_DIAG, "" neither."""
    os.environ.pop("DEEPCONTEXT_GPU_DIAG", None)
    os.environ.pop("DEEPCONTEXT_OP_DIAG", None)
    if diag.startswith("op-"):
        os.environ["DEEPCONTEXT_OP_DIAG"] = diag[3:]
    elif diag:
        os.environ["DEEPCONTEXT_GPU_DIAG"] = diag


def run(mode: str, step, n: int, dev: str, tmp: Path) -> dict:
    """One block under ``mode`` ('off', 'torch' or a deepcontext context spec)."""
    if mode == "off":
        wall, cpu, main_cpu = block(step, n, dev)
        return {"wall": wall, "cpu": cpu, "main_cpu": main_cpu}
    out = tmp / f"{mode.replace(',', '_')}-{time.monotonic_ns()}"
    if mode == "torch":
        acts = [torch.profiler.ProfilerActivity.CPU]
        if dev.startswith("cuda"):
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts) as prof:
            block(step, 1, dev, prof.step)
            wall, cpu, main_cpu = block(step, n, dev, prof.step)
        prof.export_chrome_trace(str(out))
        size = out.stat().st_size
        out.unlink()
        return {"wall": wall, "cpu": cpu, "main_cpu": main_cpu, "size": size}
    # "python,op,gpu+perf": CPU counters per context too; "+every5": a schedule that records one
    # step in five (wait=4, active=1), the paused steps in the same timed block
    spec, *options = mode.split("+")
    # "gpu%no-callbacks": a measuring switch of csrc/gpu (DEEPCONTEXT_GPU_DIAG), e.g. CUPTI's
    # records with none of our per-launch work: the floor any CUPTI tracer pays;
    # "op%op-empty-callbacks": DEEPCONTEXT_OP_DIAG=empty-callbacks (bindings/core.cpp), the torch
    # hook with every operator event returning at once: the floor RecordFunction itself sets;
    # "%op-no-prefetch": the operator events' lookups not fetched ahead (what that buys);
    # "%op-keep-wrappers": the autograd engine's evaluate_function wrappers recorded (torch_hook)
    spec, _, diag = spec.partition("%")
    context, _, interval = spec.partition("@")  # "python,op@0": CPU sampler off
    extra: dict = {"sample_interval": float(interval)} if interval else {}
    set_diag(diag)
    for option in options:
        if option == "perf":
            extra["perf"] = True
        elif option.startswith("every") and option[5:].isdigit() and int(option[5:]) >= 1:
            extra["schedule"] = deepcontext.schedule(wait=int(option[5:]) - 1, active=1)
        elif option.startswith("flush") and _seconds(option[5:]):
            extra["flush_interval"] = _seconds(option[5:])
        else:
            raise SystemExit(f"models.py: unknown mode option '+{option}' "
                             "(+perf, +everyN or +flushSECONDS)")
    extra.setdefault("flush_interval", 0.5)
    with deepcontext.profile(output=out, context=context, force=True, **extra) as prof:
        block(step, 1, dev, prof.step)  # new contexts of a fresh session, outside the window
        flushes = prof.flushes
        wall, cpu, main_cpu = block(step, n, dev, prof.step)
        flushes = prof.flushes - flushes  # periodic writes inside the timed window
    tree = deepcontext.load(out)
    res = {"wall": wall, "cpu": cpu, "main_cpu": main_cpu, "size": out.stat().st_size,
           "flushes": flushes,
           "nodes": len(tree),
           "ops": tree.total("op.count") / (n + 1), "launches": tree.total("gpu.launches") / (n + 1),
           "notes": list(tree.metadata.get("notes", []))}
    out.unlink()
    return res


def _seconds(text: str) -> float:
    """A positive, finite number of seconds, or 0."""
    try:
        seconds = float(text)
    except ValueError:
        return 0.0
    return seconds if 0 < seconds < float("inf") else 0.0


def paired(rounds: list[dict], mode: str, key: str, base: str = "off") -> tuple[float, float, float]:
    """Median, min and max over rounds of mode/base in the same round."""
    ratios = [r[mode][key] / r[base][key] for r in rounds]
    return statistics.median(ratios), min(ratios), max(ratios)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--models", default=",".join(model_zoo.MODELS))
    p.add_argument("--mode", action="append", metavar="CONTEXT",
                   help="a deepcontext context spec[@sample interval][%%GPU diag][+perf]"
                        "[+everyN], repeatable (default: " + "; ".join(DEFAULT_MODES) + ")")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--small", action="store_true", help="CPU-sized configs")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--threads", type=int)
    p.add_argument("--autocast", choices=["auto", "bf16", "off"], default="auto",
                   help="the training steps' bf16 autocast (auto: on a GPU, or on a CPU with bf16 "
                        "instructions; else the steps run in fp32)")
    p.add_argument("--markdown")
    p.add_argument("--json")
    p.add_argument("--growth", metavar="STEPS",
                   help="also one session of the first mode per step count (e.g. 100,1000): "
                        "profile size and contexts against run length (--rounds 0: only this)")
    p.add_argument("--versus", metavar="CONTEXT",
                   help="also give each other mode's ratio to this one, paired in the same rounds "
                        "(what a layer adds to the default context: --versus python,op,gpu)")
    args = p.parse_args()
    args.command = shlex.join(["python", *sys.argv])
    modes = args.mode or DEFAULT_MODES
    if args.versus and args.versus not in modes:
        p.error(f"--versus {args.versus}: not one of the --mode values")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.autocast == "auto":
        args.autocast = "bf16" if args.device.startswith("cuda") or cpu_has_bf16() else "off"
    model_zoo.AUTOCAST = args.autocast == "bf16"
    torch.manual_seed(0)
    steps, skipped = {}, {}
    for name in args.models.split(","):
        builder, n = model_zoo.MODELS[name]
        try:
            steps[name] = (builder(args.device, args.small), n)
        except model_zoo.MissingLibrary as e:
            skipped[name] = str(e)
            continue
        for _ in range(3):
            block(steps[name][0], n, args.device)  # one-time costs (cuBLAS, cuDNN, allocator)
    results: dict[str, dict] = {name: {"pristine": [], "rounds": [], "torch_rounds": []} for name in steps}
    with tempfile.TemporaryDirectory(prefix="dc-models-") as d:
        tmp = Path(d)
        for name, (step, n) in steps.items():
            for _ in range(max(3, args.rounds // 2)):
                results[name]["pristine"].append(run("off", step, n, args.device, tmp))
        phases = [["off", *modes]] + ([] if args.no_torch else [["off", "torch"]])
        for phase, key in zip(phases, ["rounds", "torch_rounds"]):
            for r in range(args.rounds):
                for name, (step, n) in steps.items():
                    order = phase[r % len(phase):] + phase[:r % len(phase)]
                    got = {mode: run(mode, step, n, args.device, tmp) for mode in order}
                    results[name][key].append(got)
                    print(f"round {r + 1} {name}: " + " ".join(
                        f"{m}={got[m]['wall'] * 1e3:.1f}ms" for m in phase), file=sys.stderr, flush=True)
        if args.growth:
            for name, (step, _) in steps.items():
                results[name]["growth"] = {
                    int(c): run(modes[0], step, int(c), args.device, tmp)
                    for c in args.growth.split(",")}
    text = report(results, modes, skipped, args)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"command": args.command, "machine": machine(),
                                               "autocast": args.autocast,
                                               "results": results, "skipped": skipped}, indent=1))
    return 0


def autograd_threads() -> str:
    return ("found: " + ", ".join(sorted(AUTOGRAD_THREADS))) if AUTOGRAD_THREADS else "none here"


def report(results: dict, modes: list[str], skipped: dict, args) -> str:
    out = [f"# Overhead on third-party models, {args.device}, "
           f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "", f"Command: `{args.command}`", ""]
    out += [f"- {line}" for line in machine()]
    out += ["- training steps: " + ("bf16 autocast" if args.autocast == "bf16" else
                                    "fp32 (no autocast)")]
    out += [f"- {args.rounds} rounds; in each, one block per mode in rotated order; ratios are "
            "paired with the unprofiled block of the same round, then the median over rounds "
            "(min-max beside it). CPU = the CPU time per step of the threads that run it: the main "
            "thread and torch's autograd threads (on a GPU backward runs there; "
            f"{autograd_threads()}); main = the main thread's alone.", ""]
    out += ["| model | off ms/step | off CPU ms | off x pristine | " + " | ".join(
        f"{m} wall (range) | {m} CPU" for m in [*modes, "torch"]) + " | ops/step | launches/step | profile |",
        "|---|" + "---:|" * (3 + 2 * (len(modes) + 1) + 3)]
    for name, res in results.items():
        rounds, trounds = res["rounds"], res["torch_rounds"]
        if not rounds:
            continue
        off = statistics.median(r["off"]["wall"] for r in rounds)
        off_cpu = statistics.median(r["off"]["cpu"] for r in rounds)
        pristine = statistics.median(r["wall"] for r in res["pristine"])
        cells = [name, f"{off * 1e3:.2f}", f"{off_cpu * 1e3:.2f}", f"{off / pristine:.3f}"]
        for mode, rs in [*((m, rounds) for m in modes), ("torch", trounds)]:
            if not rs:
                cells += ["-", "-"]
                continue
            med, lo, hi = paired(rs, mode, "wall")
            cells += [f"{med:.3f} ({lo:.2f}-{hi:.2f})", f"{paired(rs, mode, 'cpu')[0]:.3f}"]
        first = rounds[0][modes[0]]
        cells += [f"{first.get('ops', 0):.0f}", f"{first.get('launches', 0):.0f}",
                  mib(statistics.median(r[modes[0]]["size"] for r in rounds))]
        out.append("| " + " | ".join(cells) + " |")
    out += ["", "Profile writes completed inside a timed block (median over rounds; the session's "
            "first write and its last, at start and stop, fall outside): " + "; ".join(
                f"{m}: " + ", ".join(
                    f"{name} {statistics.median(r[m].get('flushes', 0) for r in res['rounds']):g}"
                    for name, res in results.items() if res["rounds"]) for m in modes)]
    notes = sorted({n for res in results.values() for r in res["rounds"] for m in modes
                    for n in r[m].get("notes", [])})
    if notes:
        out += ["", "Notes in the profiles:", ""] + [f"- {n}" for n in notes]
    if AUTOGRAD_THREADS:
        out += main_thread_table(results, modes)
        out += autograd_thread_table(results, modes)
    if args.versus:
        out += versus(results, modes, args.versus)
    if args.growth:
        counts = [int(c) for c in args.growth.split(",")]
        out += ["", f"Profile size ({modes[0]}, one session per step count; contexts in brackets):",
                "", "| model | " + " | ".join(f"{c} steps" for c in counts) + " |",
                "|---|" + "---:|" * len(counts)]
        for name, res in results.items():
            out.append(f"| {name} | " + " | ".join(
                f"{mib(res['growth'][c]['size'])} ({res['growth'][c]['nodes']})" for c in counts) + " |")
    if skipped:
        out += ["", "Skipped:", ""] + [f"- {k}: {v}" for k, v in skipped.items()]
    return "\n".join(out) + "\n"


def main_thread_table(results: dict, modes: list[str]) -> list[str]:
    """The main thread's CPU alone (what earlier runs reported as CPU): paired medians."""
    out = ["", "The main thread's CPU time alone (median of paired ratios):", "",
           "| model | off main ms | " + " | ".join(f"{m} main" for m in [*modes, "torch"]) + " |",
           "|---|" + "---:|" * (2 + len(modes))]
    for name, res in results.items():
        if not res["rounds"]:
            continue
        off_main = statistics.median(r["off"]["main_cpu"] for r in res["rounds"])
        cells = [name, f"{off_main * 1e3:.2f}"]
        for mode, rs in [*((m, res["rounds"]) for m in modes), ("torch", res["torch_rounds"])]:
            cells.append(f"{paired(rs, mode, 'main_cpu')[0]:.3f}" if rs else "-")
        out.append("| " + " | ".join(cells) + " |")
    return out


def autograd_thread_table(results: dict, modes: list[str]) -> list[str]:
    """Torch's autograd threads alone (the step threads' CPU minus the main thread's), where a GPU
    runs backward: their events are the step's densest, so a per-event cost shows most there."""
    def alone(block: dict) -> float:
        return block["cpu"] - block["main_cpu"]

    # The rounds whose backward ran on another thread (none in generation, or on the CPU).
    def with_backward(rounds: list[dict]) -> list[dict]:
        return [r for r in rounds if alone(r["off"]) > 1e-4]

    out = ["", "Torch's autograd threads alone (CPU minus the main thread's; median of paired "
           "ratios, and of the milliseconds a step they add):", "",
           "| model | off autograd ms | " + " | ".join(f"{m} autograd" for m in [*modes, "torch"]) + " |",
           "|---|" + "---:|" * (2 + len(modes))]
    for name, res in results.items():
        rounds = with_backward(res["rounds"])
        if not rounds:
            continue
        cells = [name, f"{statistics.median(alone(r['off']) for r in rounds) * 1e3:.2f}"]
        for mode, rs in [*((m, rounds) for m in modes), ("torch", with_backward(res["torch_rounds"]))]:
            if not rs:
                cells.append("-")
                continue
            ratio = statistics.median(alone(r[mode]) / alone(r["off"]) for r in rs)
            added = statistics.median(alone(r[mode]) - alone(r["off"]) for r in rs)
            cells.append(f"{ratio:.3f} ({added * 1e3:+.2f} ms)")
        out.append("| " + " | ".join(cells) + " |")
    return out


def versus(results: dict, modes: list[str], base: str) -> list[str]:
    """Each other mode against ``base`` in the same rounds: what a layer adds to it."""
    others = [m for m in modes if m != base]
    out = ["", f"Against {base}, paired in the same rounds (median, min-max):", "",
           "| model | " + " | ".join(f"{m} wall | {m} CPU" for m in others) + " |",
           "|---|" + "---:|" * (2 * len(others))]
    for name, res in results.items():
        cells = [name]
        for m in others:
            med, lo, hi = paired(res["rounds"], m, "wall", base)
            cells += [f"{med:.3f} ({lo:.2f}-{hi:.2f})"]
            med, lo, hi = paired(res["rounds"], m, "cpu", base)
            cells += [f"{med:.3f} ({lo:.2f}-{hi:.2f})"]
        out.append("| " + " | ".join(cells) + " |")
    return out


if __name__ == "__main__":
    sys.exit(main())
