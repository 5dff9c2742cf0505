"""The ``pc`` context layer (docs/pc-sampling.md): CUPTI PC samples become ``instruction`` frames
under their ``kernel`` nodes, each with its SASS text and source line and the metrics
``pc.samples`` (all samples at that PC), ``stall.<reason>`` (samples stalled for that reason)
and ``pc.selected`` (samples where the warp issued).

Capture is C++ (csrc/gpu/pc_sampling.cpp): it hands over raw per-PC stall counts and the cubins
seen at module load. This module, run once at stop and off the hot path, disassembles each cubin
once with ``nvdisasm -g`` (SASS plus line info) and folds the samples into the tree: exactly
under the launching context where CUPTI gave a correlation id (serialized mode), else split
across that kernel's contexts in proportion to their GPU time (stated in the profile).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

#: The tree's kind number for instruction frames (csrc/cct/tree.h, Kind::Instruction).
KIND_INSTRUCTION = 11
MODES = ("continuous", "serialized")
SPLIT_METHOD = ("by kernel: samples without a correlation id are split across the kernel's "
                "contexts in proportion to their gpu.time")


@dataclass(frozen=True)
class Instruction:
    pc: int
    sass: str
    file: str = ""
    line: int = 0


@dataclass(frozen=True)
class Settings:
    mode: str = "continuous"
    period_log2: int = 0          # 0: CUPTI's default
    kernels: re.Pattern[str] | None = None

    @staticmethod
    def from_env(env: dict[str, str] | None = None) -> Settings:
        """DEEPCONTEXT_PC_MODE, DEEPCONTEXT_PC_PERIOD (log2 cycles, 5-31), DEEPCONTEXT_PC_KERNELS
        (a regular expression searched in kernel names); ValueError with one line when bad."""
        env = os.environ if env is None else env
        mode = env.get("DEEPCONTEXT_PC_MODE", "continuous") or "continuous"
        if mode not in MODES:
            raise ValueError(f"DEEPCONTEXT_PC_MODE={mode!r}: choose from {', '.join(MODES)}")
        raw = env.get("DEEPCONTEXT_PC_PERIOD", "") or "0"
        try:
            period = int(raw)
        except ValueError:
            raise ValueError(f"DEEPCONTEXT_PC_PERIOD={raw!r}: expected an integer (log2 of the "
                             "sampling interval in cycles, 5 to 31)") from None
        if period and not 5 <= period <= 31:
            raise ValueError(f"DEEPCONTEXT_PC_PERIOD={period}: expected 5 to 31 (log2 cycles)")
        pattern = env.get("DEEPCONTEXT_PC_KERNELS", "")
        try:
            kernels = re.compile(pattern) if pattern else None
        except re.error as e:
            raise ValueError(f"DEEPCONTEXT_PC_KERNELS={pattern!r}: not a regular expression "
                             f"({e})") from None
        return Settings(mode, period, kernels)


# -- SASS and line info --------------------------------------------------------------------------
_FUNC = re.compile(r"^\s*\.text\.(\S+?):\s*$")
_LINE = re.compile(r'//## File "([^"]*)", line (\d+)')
_INSTR = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s*(.*?)\s*;?\s*(?:/\*.*\*/)?\s*$")


def parse_nvdisasm(text: str) -> dict[str, dict[int, Instruction]]:
    """``nvdisasm -g -c`` output -> {function (mangled): {pc offset: Instruction}}. A line-info
    comment applies to the instructions after it until the next one; with inlining the first
    (innermost) location is kept."""
    out: dict[str, dict[int, Instruction]] = {}
    func: dict[int, Instruction] | None = None
    file, line = "", 0
    for raw in text.splitlines():
        m = _FUNC.match(raw)
        if m:
            func = out.setdefault(m.group(1), {})
            file, line = "", 0
            continue
        m = _LINE.search(raw)
        if m:
            file, line = m.group(1), int(m.group(2))
            continue
        if func is None:
            continue
        m = _INSTR.match(raw)
        if m:
            sass = m.group(2).strip().rstrip(";").strip()
            func[int(m.group(1), 16)] = Instruction(int(m.group(1), 16), sass, file, line)
    return out


def find_nvdisasm() -> str | None:
    """DEEPCONTEXT_NVDISASM, PATH, the CUDA toolkit, Triton's bundled copy, the nvidia wheels."""
    forced = os.environ.get("DEEPCONTEXT_NVDISASM")
    if forced:
        return forced if os.access(forced, os.X_OK) else None
    found = shutil.which("nvdisasm")
    if found:
        return found
    roots = [os.environ[v] for v in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT") if os.environ.get(v)]
    roots += sorted(glob.glob("/usr/local/cuda*"), reverse=True)
    candidates = [os.path.join(r, "bin", "nvdisasm") for r in roots]
    for entry in dict.fromkeys(p for p in sys.path if p and os.path.isdir(p)):
        candidates += glob.glob(os.path.join(entry, "triton", "backends", "nvidia", "bin", "nvdisasm"))
        candidates += glob.glob(os.path.join(entry, "nvidia", "*", "bin", "nvdisasm"))
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def disassemble(cubin: bytes, tool: str, timeout: float = 120.0) -> tuple[dict[str, dict[int, Instruction]], str]:
    """One cubin through ``nvdisasm -g -c``: (instructions by function, "" or why not)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            p = subprocess.run([tool, "-g", "-c", f.name], capture_output=True, text=True,
                               timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            return {}, f"{tool}: {e}"
    if p.returncode != 0:
        return {}, f"{tool} exited {p.returncode}: {p.stderr.strip().splitlines()[-1:] or ''}"
    return parse_nvdisasm(p.stdout), ""


# -- folding ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelNode:
    node: int
    parent: int
    name: str        # demangled, as the kernel frame shows it
    gpu_time: float


@dataclass
class Placement:
    """Samples of one PC placed under one kernel node: the instruction frame and its metrics."""
    kernel_node: int
    name: str
    extra: str
    metrics: dict[str, float]


def reason_metrics(reasons: list[str], stalls: dict[int, float]) -> dict[str, float]:
    """CUPTI's per-reason counts -> pc.samples, stall.<reason>, pc.selected. The *_not_issued
    reasons repeat a subset of their base reason's samples and are left out of the sums."""
    out: dict[str, float] = defaultdict(float)
    for slot, n in stalls.items():
        name = reasons[slot] if 0 <= slot < len(reasons) else f"reason{slot}"
        if name.endswith("_not_issued") or n <= 0:
            continue
        out["pc.samples"] += n
        out["pc.selected" if name == "selected" else f"stall.{name}"] += n
    return dict(out)


def _frame(function: str, pc: int, sass: dict[str, dict[int, Instruction]]) -> tuple[str, str]:
    ins = sass.get(function, {}).get(pc)
    text = ins.sass if ins else ""
    parts = [f"pc=0x{pc:04x}"]
    if ins and ins.line:
        parts.append(f"source={ins.file}:{ins.line}")
    if text:
        parts.append("sass=" + text.replace(";", ","))
    name = f"0x{pc:04x} {text}".strip() if text else f"0x{pc:04x}"
    return name, ";".join(parts)


def fold(records: list[tuple], reasons: list[str], kernels: list[KernelNode],
         sass: dict[str, dict[int, Instruction]], kernel_filter: re.Pattern[str] | None = None,
         ) -> tuple[list[Placement], dict[str, float]]:
    """Places each PC record (crc, function, mangled, pc, context node or -1, {slot: samples})
    under kernel nodes: under the launching context's kernel node(s) named `function` when the
    record has a context, else across all kernel nodes of that name in proportion to gpu.time
    (equally when none has time). Returns the placements and sample counts by how they were
    joined: exact, split, unmatched (no kernel node of that name), filtered (kernel_filter)."""
    by_name: dict[str, list[KernelNode]] = defaultdict(list)
    for k in kernels:
        by_name[k.name].append(k)
    counts = {"exact": 0.0, "split": 0.0, "unmatched": 0.0, "filtered": 0.0}
    out: list[Placement] = []
    for _crc, function, mangled, pc, ctx, stalls in records:
        metrics = reason_metrics(reasons, stalls)
        total = metrics.get("pc.samples", 0.0)
        if total <= 0:
            continue
        if kernel_filter is not None and not kernel_filter.search(function):
            counts["filtered"] += total
            continue
        candidates = by_name.get(function) or by_name.get(mangled) or []
        how = "split"
        if ctx >= 0 and (under := [k for k in candidates if k.parent == ctx]):
            candidates, how = under, "exact"
        if not candidates:
            counts["unmatched"] += total
            continue
        times = [max(k.gpu_time, 0.0) for k in candidates]
        whole = sum(times)
        shares = [t / whole for t in times] if whole > 0 else [1 / len(candidates)] * len(candidates)
        if how == "exact" and len(candidates) == 1:
            shares = [1.0]
        name, extra = _frame(mangled, pc, sass)
        for k, share in zip(candidates, shares):
            if share > 0:
                out.append(Placement(k.node, name, extra, {m: v * share for m, v in metrics.items()}))
        counts[how] += total
    return out, counts


def kernel_nodes(raw: Any) -> list[KernelNode]:
    """Kernel nodes of a native snapshot (nodes, frames, metric names, metrics, core ids): the
    kernels that ran in the session, by their ids in the core."""
    nodes, frames, metric_names, metrics, ids = raw
    try:
        gpu_time = metric_names.index("gpu.time")
    except ValueError:
        gpu_time = -1
    times: dict[int, float] = defaultdict(float)
    for node, metric, value in metrics:
        if metric == gpu_time:
            times[node] += value
    return [KernelNode(ids[i], ids[parent], frames[frame][1], times[i])
            for i, (parent, frame) in enumerate(nodes)
            if i > 0 and frames[frame][0] == "kernel"]


def apply(core: Any, placements: list[Placement]) -> None:
    """Adds the placements' instruction frames and metrics to the native tree."""
    ids: dict[str, int] = {}
    for p in placements:
        node = core.child_node(p.kernel_node, KIND_INSTRUCTION, p.name, p.extra)
        for metric, value in p.metrics.items():
            if metric not in ids:
                ids[metric] = core.metric_id(metric)
            core.add_metric(node, ids[metric], value)


# -- the layer's lifecycle (called by the monitor) -------------------------------------------------
_state: dict[str, Any] = {"settings": None, "summary": None}


def configure(core: Any, settings: Settings) -> None:
    """Before GPU capture starts: turn CUPTI PC sampling on in the native layer."""
    _state["settings"] = settings
    _state["summary"] = None
    core.pc_configure(True, settings.period_log2, settings.mode)


def finish(core: Any) -> dict[str, Any] | None:
    """After gpu_stop: takes the samples, disassembles each cubin once, folds instruction
    frames into the native tree; returns the summary for the profile metadata."""
    settings: Settings | None = _state["settings"]
    if settings is None:
        return None
    _state["settings"] = None
    core.pc_configure(False, 0, settings.mode)
    got = core.pc_take()
    tool = find_nvdisasm()
    sass: dict[str, dict[int, Instruction]] = {}
    problems: list[str] = []
    used = {r[0] for r in got["records"]}
    for crc, cubin in got["cubins"].items():
        if crc not in used or tool is None:
            continue
        funcs, why = disassemble(cubin, tool)
        if why:
            problems.append(why)
        for fn, ins in funcs.items():
            sass.setdefault(fn, {}).update(ins)  # (function, pc offset) as the key, as CUPTI's
    kernels = kernel_nodes(core.snapshot())
    placements, counts = fold(got["records"], got["reasons"], kernels, sass, settings.kernels)
    known = {k.name for k in kernels}
    unmatched = sorted({r[1] for r in got["records"] if r[1] not in known and r[2] not in known})
    apply(core, placements)
    summary = {
        "mode": settings.mode, "period_log2": settings.period_log2 or "default",
        "reasons": len(got["reasons"]), "pcs": len(got["records"]),
        "total_samples": got["total_samples"], "dropped_samples": got["dropped_samples"],
        "non_user_samples": got["non_user_samples"],
        "paused_records": got["ignored_records"], "ranges": got.get("ranges", 0),
        "samples_exact": counts["exact"], "samples_split": counts["split"],
        "samples_unmatched": counts["unmatched"], "samples_filtered": counts["filtered"],
        "unmatched_kernels": [n[:120] for n in unmatched[:5]],
        "split": SPLIT_METHOD,
        "kernel_filter": settings.kernels.pattern if settings.kernels else "",
        "cubins": len(got["cubins"]), "nvdisasm": tool or "not found (no SASS or source lines)",
        "disassembly_errors": problems[:5], "cupti": got["log"],
    }
    _state["summary"] = summary
    return summary


def summary() -> dict[str, Any] | None:
    return _state["summary"]
