"""Kernel fusion: one function of the user's issuing many small elementwise operators (each a
separate kernel on the GPU, a separate pass over memory on the CPU) that could be one."""

from __future__ import annotations

from collections.abc import Iterator

from ..context import AnalysisContext
from ..finding import Finding
from ..ops import base_name, is_pointwise
from ..rule import Rule, Threshold
from ._common import (calls_per_invocation, function_regions, line_executions, percent,
                      seconds)

# Known hand-written compositions and the fused API that replaces them (first match wins).
_KNOWN = (
    ({"tanh", "mul", "add"}, "torch.nn.functional.gelu(x, approximate='tanh')"),
    ({"erf", "mul", "add"}, "torch.nn.functional.gelu(x)"),
    ({"sigmoid", "mul"}, "torch.nn.functional.silu(x)"),
    ({"exp", "div"}, "torch.softmax(x, dim)"),
    ({"rsqrt", "mul"}, "torch.nn.functional.rms_norm(x, shape, weight) or layer_norm"),
    ({"sqrt", "sub", "div"}, "torch.nn.functional.layer_norm(x, shape, weight, bias)"),
)


class KernelFusionRule(Rule):
    id = "kernel-fusion"
    category = "kernel_fusion"
    description = ("A function of yours issues several elementwise operators per call; each one "
                   "reads and writes all of memory (and on a GPU is its own kernel launch). A fused "
                   "API, torch.compile or a Triton kernel does it in one pass.")
    thresholds = {
        "min_ops_per_call": Threshold(4, "2-3 elementwise ops per statement (a*b+c) are normal; "
                                         "4+ per call is a hand-written activation/normalization"),
        "min_distinct_ops": Threshold(2, "one op repeated is a loop, not a fusion candidate"),
        "max_execution_ratio": Threshold(2, "lines of one chain run equally often; a line run "
                                            "many times per call is a loop over other tensors "
                                            "(an optimizer update), not a link of the chain"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        regions = function_regions(ctx, [o for o in ctx.sites_by_owner if o > 0])
        for region in (part for r in regions for part in self._by_executions(ctx, r)):
            per_call, names, fwd_nodes, bwd_nodes, best, best_calls = 0.0, set(), [], [], -1, -1.0
            for line in region:
                sites = ctx.forward_sites(line)
                pointwise = [s for s in sites if is_pointwise(s.name)]
                if not pointwise:
                    continue
                per_call += calls_per_invocation(ctx, sites, pointwise)
                names.update(base_name(s.name).rstrip("_") for s in pointwise)
                fwd_nodes += [s.node for s in pointwise]
                calls = sum(ctx.count(s.node) for s in pointwise)
                if calls > best_calls:
                    best, best_calls = line, calls
                bwd_nodes += [s.node for s in ctx.sites_by_owner.get(line, ()) if s.backward]
            if per_call < self.t("min_ops_per_call") or len(names) < self.t("min_distinct_ops"):
                continue
            yield from self._finding(ctx, region, best, per_call, names, fwd_nodes, bwd_nodes)

    def _by_executions(self, ctx: AnalysisContext, region: list[int]) -> list[list[int]]:
        """Split a function's lines into groups that ran about equally often: a chain's lines run
        once per call, a loop's body many times; summing both would invent a chain."""
        runs = {line: line_executions(ctx, ctx.forward_sites(line)) for line in region}
        groups: list[list[int]] = []
        for line in sorted(region, key=lambda n: runs[n]):
            if groups and runs[line] <= self.t("max_execution_ratio") * runs[groups[-1][0]]:
                groups[-1].append(line)
            else:
                groups.append([line])
        return [sorted(g) for g in groups]

    def _finding(self, ctx: AnalysisContext, region: list[int], node: int, per_call: float,
                 names: set[str], fwd: list[int], bwd: list[int]) -> Iterator[Finding]:
        host = sum(ctx.host_time(n) for n in fwd + bwd)
        gpu = sum(ctx.inc("gpu.time")[n] for n in fwd + bwd)
        launches = sum(ctx.inc("gpu.launches")[n] for n in fwd + bwd)
        spent, where = (gpu, "GPU") if gpu > 0 else (host, "host")
        # A fused kernel makes one pass where the chain made ``per_call``: keep 1/per_call.
        gain = spent * (1 - 1 / per_call)
        severity = self.severity_for(ctx, gain)
        if severity is None:
            return
        ops = ", ".join(sorted(names))
        lines = sorted({ctx.tree.nodes[r].frame.line for r in region})
        span = f"lines {lines[0]}-{lines[-1]}" if len(lines) > 1 else f"line {lines[0]}"
        fused = next((api for need, api in _KNOWN if need <= names), None)
        fix = (f"replace the hand-written math with {fused}" if fused else
               "fuse the chain: decorate the function with @torch.compile (Inductor emits one "
               "kernel for the chain), or write one Triton/C++ kernel")
        calls = sum(ctx.count(n) for n in fwd)
        evidence = {"ops_per_call": round(per_call, 2), "distinct_ops": len(names),
                    "op_calls": int(calls), "time_s": spent, "backward_time_s": sum(
                        ctx.inc("gpu.time" if gpu > 0 else "op.time")[n] for n in bwd)}
        if gpu > 0:
            evidence["gpu_launches"] = int(launches)
            evidence["mean_kernel_s"] = gpu / launches if launches else 0.0
        fn = ctx.tree.nodes[node].frame.name
        yield ctx.finding(
            self, node, severity=severity,
            title=f"{per_call:.0f} elementwise ops per call of {fn}() could be one fused kernel",
            message=(f"{fn}() ({span}) issues {per_call:.1f} elementwise operators per call "
                     f"({ops}; {calls:.0f} calls; with their backward they took "
                     f"{seconds(spent)} of {where} time, {percent(ctx.fraction(spent))} of the "
                     f"run). Each is a separate pass over memory"
                     + (" and a separate kernel launch." if gpu > 0 else ".")),
            evidence=evidence,
            suggestion=(f"{fix}. Example: `{fn} = torch.compile({fn})`." if not fused
                        else f"{fix} (one kernel, forward and backward); or wrap {fn} in "
                             f"torch.compile."),
            gain_seconds=gain,
            method=(f"a fused kernel makes one pass instead of {per_call:.1f}: saves "
                    f"(1 - 1/{per_call:.1f}) of the chain's {where} time, forward and backward"))


RULES = [KernelFusionRule]
