"""CPU latency: host time that dwarfs the work it produces. On a GPU profile, lines whose host
time is many times the GPU time of the kernels they launch (the GPU starves); on any profile,
Python loops issuing thousands of tiny indexing/scalar operators one element at a time."""

from __future__ import annotations

from collections.abc import Iterator

from ..context import AnalysisContext
from ..finding import Finding
from ..ops import ELEMENT_ACCESS, base_name
from ..rule import Rule, Threshold
from ._common import percent, seconds


class CpuLatencyRule(Rule):
    id = "cpu-latency"
    category = "cpu_latency"
    description = ("Host-side overhead dominates: launch-bound lines on the GPU, or Python loops "
                   "issuing tiny per-element operators.")
    thresholds = {
        "min_host_to_gpu": Threshold(3.0, "host time 3x the GPU time it launches means the GPU "
                                          "idles two thirds of the time (nsys flags < 50% use)"),
        "max_mean_kernel_s": Threshold(20e-6, "HTA's short kernel: GPU time under the 5-20 us "
                                              "it costs to launch"),
        "min_loop_calls": Threshold(1000, "a Python loop over elements issues thousands of calls"),
        "max_mean_call_s": Threshold(20e-6, "an op under 20 us is dominated by its ~5-10 us "
                                            "dispatch overhead, not by work"),
        "min_access_share": Threshold(0.5, "at least half the calls are indexing/scalar ops "
                                           "(select, item, copy_, ...)"),
        "vectorized_keep": Threshold(0.1, "a vectorized rewrite keeps ~10% of the loop's time "
                                          "(one call per batch instead of per element)"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        if ctx.has_gpu:
            yield from self._launch_bound(ctx)
        yield from self._element_loops(ctx)

    def _launch_bound(self, ctx: AnalysisContext) -> Iterator[Finding]:
        gpu, launches = ctx.inc("gpu.time"), ctx.inc("gpu.launches")
        cpu, ops, init = ctx.inc("cpu.time"), ctx.inc("op.time"), ctx.inc("gpu.init")
        comp_cpu, comp_wall = ctx.inc("compile.host"), ctx.inc("compile.time")
        for owner in ctx.user_nodes():
            if launches[owner] <= 0:
                continue
            inner = self._child_owners(ctx, owner)
            # sampled CPU time, or operator wall time (launches included) when sampling missed
            # it, less the one-time CUDA set-up that the line happened to trigger
            host = max(cpu[owner] - sum(cpu[c] for c in inner)  # less torch.compile (issue 15)
                       - (comp_cpu[owner] - sum(comp_cpu[c] for c in inner)),
                       ops[owner] - sum(ops[c] for c in inner)
                       - (comp_wall[owner] - sum(comp_wall[c] for c in inner))) - (
                init[owner] - sum(init[c] for c in inner))
            dev = gpu[owner] - sum(gpu[c] for c in inner)
            n = launches[owner] - sum(launches[c] for c in inner)
            if n <= 0 or host < self.t("min_host_to_gpu") * dev:
                continue
            mean = dev / n
            if mean > self.t("max_mean_kernel_s"):
                continue
            gain = host - dev
            severity = self.severity_for(ctx, gain)
            if severity is None:
                continue
            yield ctx.finding(
                self, owner, severity=severity,
                title=f"launch-bound: {seconds(host)} of host time for {seconds(dev)} of GPU work "
                      f"at {ctx.where(owner)}",
                message=(f"{ctx.where(owner)} spends {seconds(host)} on the host to launch "
                         f"{n:.0f} kernels that run {seconds(dev)} on the GPU (mean "
                         f"{seconds(mean)} per kernel): the GPU waits for the CPU."),
                evidence={"host_time_s": host, "gpu_time_s": dev, "launches": int(n),
                          "mean_kernel_s": mean},
                suggestion=("cut per-launch host overhead: capture the step with CUDA graphs "
                            "(torch.compile(model, mode='reduce-overhead') or torch.cuda.graphs), "
                            "fuse small ops with torch.compile, or raise the batch size so each "
                            "kernel does more work"),
                gain_seconds=gain,
                method="host time above the GPU time it launches (the GPU-bound step time)")

    @staticmethod
    def _child_owners(ctx: AnalysisContext, owner: int) -> list[int]:
        """Deeper user lines directly under ``owner``: their time is theirs, not this line's."""
        out, stack = [], list(ctx.tree.nodes[owner].children)
        while stack:
            n = stack.pop()
            if ctx.owner[n] == n:
                out.append(n)
            else:
                stack.extend(ctx.tree.nodes[n].children)
        return out

    def _element_loops(self, ctx: AnalysisContext) -> Iterator[Finding]:
        for owner, sites in ctx.sites_by_owner.items():
            fwd = [s for s in sites if not s.backward]
            calls = sum(ctx.count(s.node) for s in fwd)
            if owner <= 0 or calls < self.t("min_loop_calls"):
                continue
            access = sum(ctx.count(s.node) for s in fwd if base_name(s.name) in ELEMENT_ACCESS)
            spent = sum(ctx.host_time(s.node) for s in fwd)
            # the line's own Python time (outside any operator) is loop overhead too
            spent = max(spent, ctx.host_time(owner) - sum(ctx.host_time(c)
                                                          for c in self._child_owners(ctx, owner)))
            mean = spent / calls
            if access / calls < self.t("min_access_share") or mean > self.t("max_mean_call_s"):
                continue
            gain = spent * (1 - self.t("vectorized_keep"))
            severity = self.severity_for(ctx, gain)
            if severity is None:
                continue
            top = sorted({base_name(s.name) for s in fwd}, key=lambda n: -sum(
                ctx.count(s.node) for s in fwd if base_name(s.name) == n))[:4]
            yield ctx.finding(
                self, owner, severity=severity,
                title=f"Python loop issues {calls:.0f} tiny ops at {ctx.where(owner)} "
                      f"(mean {seconds(mean)} each)",
                message=(f"{ctx.where(owner)} issues {calls:.0f} operators ({', '.join(top)}, "
                         f"...), {percent(access / calls)} of them indexing or scalar access, "
                         f"averaging {seconds(mean)} each: per-call dispatch overhead, not "
                         f"work, is {seconds(spent)} ({percent(ctx.fraction(spent))} of the run)."),
                evidence={"op_calls": int(calls), "access_calls": int(access),
                          "mean_call_s": mean, "time_s": spent},
                suggestion=("vectorize the loop: operate on whole tensors (index with a tensor "
                            "of indices, torch.stack/torch.cat once, masks instead of per-element "
                            "if), or torch.vmap over the per-element function"),
                gain_seconds=gain,
                method=f"a vectorized rewrite keeps ~{self.t('vectorized_keep'):.0%} of the "
                       f"loop's host time")


RULES = [CpuLatencyRule]
