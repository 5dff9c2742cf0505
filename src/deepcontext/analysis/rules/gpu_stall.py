"""Fine-grained GPU stalls: when instruction-level PC samples exist under a kernel, report a
stall reason that dominates the kernel and the instruction (source line) it concentrates on.

Input convention: ``instruction`` frames under a ``kernel`` frame (or the kernel node itself,
when PC samples were kept per kernel) carry ``pc.samples`` (all samples at that PC) and the
samples stalled for each reason as ``pc.samples.<reason>`` (or ``stall.<reason>``), exclusive."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from ...tree.frame import INSTRUCTION, KERNEL
from ..context import AnalysisContext
from ..finding import Finding
from ..rule import Rule, Threshold
from ._common import percent, seconds

# Nsight Compute's reading of each stall reason, shortened to the fix.
ADVICE = {
    "long_scoreboard": "waiting on global/local memory (L1TEX): coalesce accesses, stage reused "
                       "data in shared memory, raise occupancy to hide latency",
    "short_scoreboard": "waiting on shared memory or special-function results: avoid shared-"
                        "memory bank conflicts, cut transcendental math (MUFU)",
    "mio_throttle": "the memory I/O queue is full: fewer, wider shared-memory accesses",
    "lg_throttle": "the local/global queue is full: vectorize loads (float4), avoid local-"
                   "memory spills",
    "barrier": "warps wait at __syncthreads: balance work between warps, fewer barriers",
    "math_pipe_throttle": "a math pipe is saturated: the kernel is compute bound; use tensor "
                          "cores or lower precision",
    "wait": "fixed-latency dependencies: more independent instructions (ILP, unrolling)",
    "not_selected": "warps eligible but not picked: plenty of parallelism; fine unless issue "
                    "slots are full",
    "branch_resolving": "divergent branches: make control flow uniform within a warp",
    "membar": "memory fences: remove unneeded __threadfence / atomics ordering",
    "dispatch_stall": "dispatch conflicts: check pipe contention",
    "drain": "waiting for memory stores at exit: fewer/earlier stores",
    "imc_miss": "immediate constant cache misses: keep constants uniform across the warp",
    "tex_throttle": "the texture pipe is saturated: fewer texture/surface fetches",
    "no_instruction": "instruction cache misses: smaller unrolled code",
    "sleeping": "warps sleep (nanosleep/backoff): check spin loops",
    "warpgroup_arrive": "waiting on wgmma warpgroup arrival (Hopper GMMA): pipeline the MMA "
                        "stages deeper",
}


class GpuStallRule(Rule):
    id = "gpu-stall"
    category = "gpu_stall"
    description = ("A warp stall reason dominates a kernel's PC samples (active only when the "
                   "profile has instruction frames).")
    thresholds = {
        "min_reason_share": Threshold(0.30, "Nsight Compute's CPIStall rule reports a reason "
                                            "above 30% of the cycles between issues"),
        "min_hot_instruction": Threshold(0.10, "ncu marks a source line holding >10% of samples"),
        "min_samples": Threshold(100, "fewer samples give shares too noisy to act on"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        by_kernel: dict[int, list[int]] = defaultdict(list)
        for node in ctx.tree.nodes[1:]:
            if node.frame.kind == INSTRUCTION:
                kernel = next((a for a in reversed(ctx.ancestors(node.id))
                               if ctx.tree.nodes[a].frame.kind == KERNEL), None)
                if kernel is not None:
                    by_kernel[kernel].append(node.id)
            elif node.frame.kind == KERNEL and _stalls(node.metrics):
                by_kernel[node.id].append(node.id)  # samples kept on the kernel itself
        for kernel, instrs in by_kernel.items():
            yield from self._kernel(ctx, kernel, instrs)

    def _kernel(self, ctx: AnalysisContext, kernel: int, instrs: list[int]) -> Iterator[Finding]:
        reasons: dict[str, float] = defaultdict(float)
        total = 0.0
        for i in instrs:
            m = ctx.tree.nodes[i].metrics
            stalls = _stalls(m)
            total += m.get("pc.samples", sum(stalls.values()))
            for r, v in stalls.items():
                reasons[r] += v
        if total < self.t("min_samples") or not reasons:
            return
        reason, n = max(reasons.items(), key=lambda kv: kv[1])
        share = n / total
        if share <= self.t("min_reason_share"):
            return
        hot = max(instrs, key=lambda i: _stalls(ctx.tree.nodes[i].metrics).get(reason, 0.0))
        hot_n = _stalls(ctx.tree.nodes[hot].metrics).get(reason, 0.0)
        node = hot if hot_n / total > self.t("min_hot_instruction") else kernel
        k_time = ctx.inc("gpu.time")[kernel]
        gain = k_time * share
        severity = self.severity_for(ctx, gain) or "note"
        kname = ctx.tree.nodes[kernel].frame.name
        instr = ctx.tree.nodes[hot].frame
        where = instr.get("source") or (f"{instr.file}:{instr.line}" if instr.line else "")
        pc = instr.get("pc") or instr.name
        yield ctx.finding(
            self, node, severity=severity,
            title=f"{reason} stalls {percent(share)} of {kname[:60]}",
            message=(f"Kernel {kname} (launched from {ctx.where(kernel)}, {seconds(k_time)}) "
                     f"spends {percent(share)} of its {total:.0f} PC samples stalled on "
                     f"{reason}; instruction {pc}{' (' + where + ')' if where else ''} holds "
                     f"{percent(hot_n / total)} of them."),
            evidence={"samples": int(total), "reason": reason, "reason_share": round(share, 4),
                      "hot_instruction_share": round(hot_n / total, 4), "kernel_time_s": k_time},
            suggestion=ADVICE.get(reason, f"reduce {reason} stalls (see the Nsight Compute "
                                          f"stall reason reference)"),
            gain_seconds=gain,
            method="upper bound (Nsight Compute's CPIStall estimate): the reason's share of the "
                   "kernel's samples times its GPU time")


def _stalls(metrics: dict[str, float]) -> dict[str, float]:
    """Samples per stall reason: ``pc.samples.<reason>`` (the PC sampling source's names) or
    ``stall.<reason>``."""
    out: dict[str, float] = defaultdict(float)
    for k, v in metrics.items():
        if k.startswith("pc.samples."):
            out[k[len("pc.samples."):]] += v
        elif k.startswith("stall."):
            out[k[len("stall."):]] += v
    return dict(out)


RULES = [GpuStallRule]
