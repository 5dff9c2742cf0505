"""Known metrics: ``<domain>.<what>`` with a unit. Values are stored exclusive per node."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MetricInfo:
    name: str
    unit: str  # "s", "count", "bytes"
    description: str


KNOWN_METRICS: dict[str, MetricInfo] = {
    m.name: m
    for m in (
        MetricInfo("cpu.time", "s", "CPU time sampled on this context (per-thread CPU clock)"),
        MetricInfo("op.time", "s", "wall time inside framework operators, measured at entry/exit"),
        MetricInfo("op.count", "count", "operator calls"),
        MetricInfo("op.first_time", "s", "exclusive wall time of each operator context's first "
                                         "call (one-time set-up inside it; part of op.time)"),
        MetricInfo("autograd.nodes", "count", "autograd graph nodes created by forward operators"),
        MetricInfo("gpu.time", "s", "GPU kernel execution time"),
        MetricInfo("gpu.launches", "count", "GPU kernel launches"),
        MetricInfo("memcpy.time", "s", "GPU copy time"),
        MetricInfo("memcpy.bytes", "bytes", "bytes copied"),
        MetricInfo("memcpy.count", "count", "copies"),
        MetricInfo("memset.time", "s", "GPU memset time"),
        MetricInfo("memset.bytes", "bytes", "bytes set"),
        MetricInfo("memset.count", "count", "memsets"),
        MetricInfo("sync.wait", "s", "host time blocked waiting for the GPU"),
        MetricInfo("sync.count", "count", "host-device synchronizations"),
        MetricInfo("gpu.init", "s", "host time creating the CUDA context and loading modules "
                                    "(one-time set-up)"),
        MetricInfo("compile.time", "s", "wall time of torch.compile compilations (Dynamo to "
                                        "kernel build), at their [marker] compile"),
        MetricInfo("compile.count", "count", "torch.compile compilations"),
        MetricInfo("compile.host", "s", "CPU time sampled inside a [marker] compile "
                                        "(host-time rules leave it out)"),
        MetricInfo("comm.bytes", "bytes", "bytes of the tensors a collective sends from this "
                                          "rank (its input buffers), on its c10d operator"),
        MetricInfo("native.samples", "count", "samples that carried a native stack"),
        # The memory layer (docs/memory.md); mem.<device>.peak.bytes is the per-device peak.
        MetricInfo("mem.alloc.bytes", "bytes", "bytes allocated by tensors at this context"),
        MetricInfo("mem.alloc.count", "count", "tensor allocations at this context"),
        MetricInfo("mem.peak.bytes", "bytes", "bytes allocated here and live at their device's "
                                              "peak (summed over devices)"),
        MetricInfo("mem.live.bytes", "bytes", "bytes allocated here and still live at the "
                                              "snapshot"),
        MetricInfo("mem.live.count", "count", "allocations made here and still live"),
        MetricInfo("mem.segment.alloc.count", "count", "memory segments the caching allocator "
                                                       "reserved from the device (cudaMalloc)"),
        MetricInfo("mem.segment.alloc.bytes", "bytes", "bytes of those segments"),
        MetricInfo("mem.segment.free.count", "count", "segments the caching allocator released "
                                                      "(cudaFree)"),
        MetricInfo("mem.segment.free.bytes", "bytes", "bytes of those segments"),
        MetricInfo("mem.alloc.retries", "count", "allocations retried after freeing the cache "
                                                 "(each synchronizes the device)"),
        MetricInfo("mem.oom.count", "count", "out-of-memory errors"),
        MetricInfo("mem.cudamalloc.time", "s", "host time in cudaMalloc/cuMemAlloc (gpu layer)"),
        MetricInfo("mem.cudamalloc.count", "count", "cudaMalloc/cuMemAlloc calls"),
        MetricInfo("mem.cudafree.time", "s", "host time in cudaFree/cuMemFree, which also waits "
                                             "for the device (gpu layer)"),
        MetricInfo("mem.cudafree.count", "count", "cudaFree/cuMemFree calls"),
        MetricInfo("hook.count", "count", "calls of a declared runtime function (--hooks)"),
        MetricInfo("hook.time", "s", "wall time inside a declared function, nested hooked calls excluded"),
        MetricInfo("hook.bytes", "bytes", "bytes passed to a declared function (its bytes_arg)"),
        MetricInfo("perf.page_faults", "count", "page faults (perf_event_open, --perf)"),
        MetricInfo("perf.context_switches", "count", "context switches (--perf)"),
        MetricInfo("perf.cpu_migrations", "count", "moves to another CPU (--perf)"),
        MetricInfo("perf.cycles", "count", "CPU cycles (--perf, where the kernel has a PMU)"),
        MetricInfo("perf.instructions", "count", "instructions retired (--perf, with a PMU)"),
        MetricInfo("perf.cache_misses", "count", "last-level cache misses (--perf, with a PMU)"),
        MetricInfo("perf.branch_misses", "count", "mispredicted branches (--perf, with a PMU)"),
    )
}

#: The metric a report shows when none is asked for, most telling first.
DEFAULT_METRIC_ORDER = ("gpu.time", "cpu.time", "op.time", "op.count")


def description_of(metric: str) -> str:
    """What a metric means ("" when unknown); per-device memory peaks are named by pattern."""
    info = KNOWN_METRICS.get(metric)
    if info:
        return info.description
    parts = metric.split(".")
    if len(parts) == 4 and parts[0] == "mem" and parts[2:] == ["peak", "bytes"]:
        return f"bytes allocated here and live at the {parts[1]} peak"
    return ""


def unit_of(metric: str) -> str:
    info = KNOWN_METRICS.get(metric)
    if info:
        return info.unit
    if metric.endswith((".time", ".wait")):
        return "s"
    if metric.endswith(".bytes"):
        return "bytes"
    return "count"


def format_value(value: float, unit: str) -> str:
    """Human formatting for a metric value."""
    if not math.isfinite(value):  # (a corrupt or hand-built profile: "inf", "nan", no error)
        return str(value)
    if unit == "s":
        if abs(value) >= 59.95:  # minutes and hours as a person reads a clock: 18m 20s, 2h 05m
            sign, whole = ("-" if value < 0 else ""), round(abs(value))
            if whole >= 3600:
                return f"{sign}{whole // 3600}h {whole % 3600 // 60:02d}m"
            return f"{sign}{whole // 60}m {whole % 60:02d}s"
        for scale, suffix in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
            if abs(value) >= scale:
                return f"{value / scale:.3g}{suffix}"
        return f"{value * 1e9:.3g}ns" if value else "0s"
    if unit == "bytes":
        for scale, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if abs(value) >= scale:
                return f"{value / scale:.3g}{suffix}"
        return f"{int(value)}B"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.3g}"
