"""CPU latency: host time that dwarfs the work it produces. On a GPU profile, lines whose host
time is many times the GPU time of the kernels they launch (the GPU starves); on any profile,
Python loops issuing thousands of tiny indexing/scalar operators one element at a time."""

from __future__ import annotations

from collections.abc import Iterator

from ..context import AnalysisContext
from ..finding import Finding
from ..ops import ELEMENT_ACCESS, base_name
from ..rule import Rule, Threshold
from ._common import RowLoop, code_line, percent, row_loops, seconds


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
        "min_runs": Threshold(10, "a line run fewer times is set-up or warm-up (model "
                                  "construction, .to('cuda'), the first calls), not the steady "
                                  "state a launch-bound fix speeds up"),
        "min_iterations": Threshold(8, "a loop body run 8+ times per call of its function, "
                                       "indexing a tensor each time, is a loop over a dimension"),
        "max_ops_per_iteration": Threshold(64, "a few dozen operators per iteration are a "
                                               "per-row computation; more is a model step"),
        "max_mean_loop_op_s": Threshold(50e-6, "operators on one row take a few microseconds "
                                               "(50 us under load); longer ones do real work"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        if ctx.has_gpu:
            yield from self._launch_bound(ctx)
        loops = row_loops(ctx, min_iterations=self.t("min_iterations"),
                          max_ops_per_iteration=self.t("max_ops_per_iteration"),
                          max_mean_op_s=self.t("max_mean_loop_op_s"))
        yield from self._row_loops(ctx, loops)
        yield from self._element_loops(ctx, {line for loop in loops for line in loop.lines})

    def _launch_bound(self, ctx: AnalysisContext) -> Iterator[Finding]:
        gpu, launches = ctx.inc("gpu.time"), ctx.inc("gpu.launches")
        for owner in ctx.user_nodes():
            # set-up lines (model construction, a one-time .to('cuda'), warm-up calls) run a
            # few times; their host time is first-use cost, not launch overhead
            if launches[owner] <= 0 or not ctx.repeated(owner, self.t("min_runs")):
                continue
            inner = self._child_owners(ctx, owner)
            # steady-state host time (set-up, compile and first calls left out), this line's
            # own: deeper user lines are judged on their own
            host = ctx.host_time(owner) - sum(ctx.host_time(c) for c in inner)
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
                message=(f"{ctx.where(owner)} ran {ctx.runs(owner):.0f} times and spent "
                         f"{seconds(host)} on the host (set-up and compilation left out) to "
                         f"launch {n:.0f} kernels that run {seconds(dev)} on the GPU (mean "
                         f"{seconds(mean)} per kernel): the GPU waits for the CPU."),
                evidence={"host_time_s": host, "gpu_time_s": dev, "launches": int(n),
                          "mean_kernel_s": mean, "runs": int(ctx.runs(owner))},
                suggestion=("cut per-launch host overhead: capture the step with CUDA graphs "
                            "(`compiled = torch.compile(model, mode='reduce-overhead')`, or "
                            "torch.cuda.graphs), fuse small ops with torch.compile, or raise the "
                            "batch size so each kernel does more work"),
                gain_seconds=gain,
                method="host time above the GPU time it launches (the GPU-bound step time)")

    def _row_loops(self, ctx: AnalysisContext, loops: list[RowLoop]) -> Iterator[Finding]:
        for loop in loops:
            gain = loop.host_time * (1 - self.t("vectorized_keep"))
            severity = self.severity_for(ctx, gain)
            if severity is None:
                continue
            line = max(loop.lines, key=lambda n: sum(ctx.count(s.node)
                                                     for s in ctx.forward_sites(n)))
            lines = sorted(ctx.tree.nodes[n].frame.line for n in loop.lines)
            span = f"lines {lines[0]}-{lines[-1]}" if len(lines) > 1 else f"line {lines[0]}"
            fn = ctx.tree.nodes[line].frame.name.rsplit(".", 1)[-1]
            yield ctx.finding(
                self, line, severity=severity,
                title=(f"Python loop over a tensor's rows at {ctx.where(line)}: "
                       f"{loop.iterations:.0f} iterations per call of {fn}(), "
                       f"{loop.ops_per_iteration:.0f} tiny "
                       f"op{'' if round(loop.ops_per_iteration) == 1 else 's'} each"),
                message=(f"{fn}() ({span}) runs its loop body {loop.iterations:.0f} times per "
                         f"call ({loop.runs:.0f} times in all), each time picking one element "
                         f"or row ({loop.indexing}) and issuing {loop.ops_per_iteration:.1f} "
                         f"operators on it: {seconds(loop.host_time)} "
                         f"({percent(ctx.fraction(loop.host_time))} of the run) of per-operator "
                         f"overhead that one operator over the whole dimension pays once."),
                evidence={"iterations_per_call": round(loop.iterations, 2),
                          "body_runs": int(loop.runs),
                          "ops_per_iteration": round(loop.ops_per_iteration, 2),
                          "time_s": loop.host_time, "indexing": loop.indexing},
                suggestion=("vectorize over that dimension: apply the body's operators to the "
                            "whole tensor at once (batched matmul/elementwise ops over dim 0, "
                            "index with a tensor of indices, masks instead of per-row if), or "
                            "torch.vmap over the per-row function; fuse afterwards if a chain "
                            "remains"),
                gain_seconds=gain,
                method=f"a vectorized rewrite keeps ~{self.t('vectorized_keep'):.0%} of the "
                       f"loop's host time (one call per batch, not per row)")

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

    def _element_loops(self, ctx: AnalysisContext, taken: set[int]) -> Iterator[Finding]:
        for owner, sites in ctx.sites_by_owner.items():
            if owner in taken:
                continue  # already a row loop
            # operators the line itself issued (directly or through torch's thin wrappers);
            # those a library function issues for it (a forward pass's views and indexing)
            # are not a loop of the user's
            fwd = [s for s in sites if not s.backward and not ctx.in_setup[s.node]
                   and code_line(ctx, s.node) == owner]
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
