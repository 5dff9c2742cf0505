"""torch.compile: recompilation churn, graph breaks inside hot compiled code, and compile time
that dominates a short run. They read what the session recorded (``torch_compile`` metadata,
``[marker] compile`` nodes with ``compile.time``/``compile.count``; docs/torch-compile.md)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

from ...tree.frame import MARKER, OP, PYTHON
from ..context import AnalysisContext
from ..finding import Finding
from ..rule import Rule, Threshold
from ._common import percent, seconds


def _compile_markers(ctx: AnalysisContext) -> list[int]:
    return [n.id for n in ctx.tree.nodes if n.frame.kind == MARKER and n.frame.name == "compile"]


def _marker_at(ctx: AnalysisContext, at: dict[str, Any] | None) -> int | None:
    """The ``[marker] compile`` node under the user line ``at`` (file, line)."""
    for m in _compile_markers(ctx):
        owner = ctx.owner[m]
        if owner > 0 and at and ctx.tree.nodes[owner].frame.file == at.get("file") and (
                ctx.tree.nodes[owner].frame.line == at.get("line")):
            return m
    return None


def _compiled_regions(ctx: AnalysisContext) -> list[int]:
    """Dynamo's ``Torch-Compiled Region`` operators: each call of compiled code."""
    return [n.id for n in ctx.tree.nodes
            if n.frame.kind == OP and n.frame.name.startswith("Torch-Compiled Region")]


def _info(ctx: AnalysisContext) -> dict[str, Any]:
    info = ctx.metadata.get("torch_compile")
    return info if isinstance(info, dict) else {}


class CompileTimeRule(Rule):
    id = "compile-time"
    category = "compile"
    description = "torch.compile's compilation takes a large share of a short run (a note)."
    thresholds = {
        "min_compile_share": Threshold(0.3, "compile wall time over a third of compile time plus "
                                            "the rest of the measured time: the run is too short "
                                            "to amortize it; its steady state is what the other "
                                            "findings describe"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        markers = _compile_markers(ctx)
        total = sum(ctx.tree.exclusive(m, "compile.time") for m in markers)
        count = sum(ctx.tree.exclusive(m, "compile.count") for m in markers)
        # the rest of the run: host time outside compilation (profiled_time leaves compilation
        # out unless the steady state is too short, when it keeps set-up in), or GPU time
        host = ctx.profiled_time - (ctx.tree.total("compile.host") if ctx.setup_included else 0.0)
        rest = max(host, ctx.tree.total("gpu.time"))
        run = total + max(rest, 0.0)
        if not markers or total <= 0 or total / run < self.t("min_compile_share"):
            return
        top = max(markers, key=lambda m: ctx.tree.exclusive(m, "compile.time"))
        yield ctx.finding(
            self, top, severity="note",
            title=f"torch.compile compiled for {seconds(total)} ({percent(min(1, total / run))} "
                  f"of the run) in {count:.0f} compilations",
            message=(f"{count:.0f} compilations took {seconds(total)}, against {seconds(rest)} for "
                     f"everything else the profile measured; the longest ran at {ctx.where(top)}. "
                     "Compilation is paid once per process (less with a warm cache); the rest of "
                     "the profile is the steady state."),
            evidence={"compile_time_s": total, "compilations": int(count), "rest_time_s": rest},
            suggestion=("profile more steps (or a schedule that skips the first ones) to see the "
                        "steady state; keep Inductor's cache warm between runs "
                        "(TORCHINDUCTOR_CACHE_DIR on a persistent disk, "
                        "torch.compiler.save_cache_artifacts)"),
            gain_seconds=total,
            method="compile wall time from Dynamo's compile callbacks; a warm cache saves most "
                   "of it")


class RecompileChurnRule(Rule):
    id = "recompile-churn"
    category = "compile"
    description = "A compiled function recompiles again and again (guards keep failing)."
    thresholds = {
        "min_recompiles": Threshold(3, "two compilations are normal (static, then dynamic "
                                       "shapes); three or more recompiles are churn"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        by_function: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
        for c in _info(ctx).get("compiles", []):
            if c.get("trigger") == "DYNAMO" and c.get("co_filename"):
                by_function[(c["co_filename"], c.get("co_firstlineno"), c.get("co_name"))].append(c)
        for (file, first, name), compiles in by_function.items():
            again = [c for c in compiles if c.get("recompile_reason")]
            if len(again) < self.t("min_recompiles"):
                continue
            at = next((c["at"] for c in reversed(compiles) if c.get("at")), None)
            node = _marker_at(ctx, at)
            if node is None:
                continue
            spent = sum(float(c.get("seconds", 0.0)) for c in compiles)
            calls = self._calls(ctx, ctx.owner[node])
            reasons = Counter(str(c["recompile_reason"]).splitlines()[0][:200] for c in again)
            top, n = reasons.most_common(1)[0]
            every = f", once every {calls / len(compiles):.1f} calls" if calls else ""
            severity = self.severity_for(ctx, spent) or "note"
            yield ctx.finding(
                self, node, severity="warning" if severity == "note" else severity,
                title=f"{name} ({file.rsplit('/', 1)[-1]}:{first}) recompiled {len(again)} "
                      f"times{every}",
                message=(f"{name} was compiled {len(compiles)} times from {ctx.where(node)}"
                         f"{every}, {seconds(spent)} in all; the most common reason "
                         f"({n} of {len(again)}): {top}"),
                evidence={"compilations": len(compiles), "recompilations": len(again),
                          "compile_time_s": spent, "calls": int(calls), "reason": top},
                suggestion=("make the guard hold: mark changing sizes dynamic "
                            "(torch._dynamo.mark_dynamic or torch.compile(dynamic=True)), pad "
                            "inputs to a few fixed shapes, keep Python scalars that change out "
                            "of the compiled function (pass tensors)"),
                gain_seconds=spent - spent / len(compiles),
                method="compile time of every compilation after the first")

    @staticmethod
    def _calls(ctx: AnalysisContext, owner: int) -> float:
        """Calls of compiled regions under the line (the ``Torch-Compiled Region`` operator)."""
        if owner <= 0:
            return 0.0
        under = set(ctx.descendants(owner))
        return sum(ctx.tree.exclusive(n, "op.count") for n in _compiled_regions(ctx) if n in under)


class GraphBreakRule(Rule):
    id = "graph-break"
    category = "compile"
    description = "A graph break splits compiled code that takes a real share of the run."

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        seen: dict[tuple, list[str]] = defaultdict(list)
        for b in _info(ctx).get("graph_breaks", []):
            if b.get("file") and b.get("line"):
                seen[(b["file"], int(b["line"]), b.get("function", ""))].append(b.get("reason", ""))
        for (file, line, function), reasons in seen.items():
            region = self._region(ctx, file, function)
            if not region:
                continue
            spent = sum(max(ctx.host_time(n), ctx.inc("gpu.time")[n]) for n in region)
            severity = self.severity_for(ctx, spent)
            if severity is None:
                continue
            at = [n for n in ctx.user_nodes() if ctx.tree.nodes[n].frame.file == file
                  and ctx.tree.nodes[n].frame.line == line]
            node = at[0] if at else region[0]
            reason = Counter(reasons).most_common(1)[0][0]
            yield ctx.finding(
                self, node, severity="warning" if severity == "error" else severity,
                title=f"graph break at {file.rsplit('/', 1)[-1]}:{line} splits {function} "
                      f"({seconds(spent)}, {percent(ctx.fraction(spent))} of the run)",
                message=(f"Dynamo stopped tracing {function} at {file.rsplit('/', 1)[-1]}:{line} "
                         f"({reason}); the code around it runs as separate graphs with eager "
                         "Python between them, so Inductor cannot fuse across the break."),
                evidence={"region_time_s": spent, "breaks": len(reasons), "reason": reason[:300]},
                suggestion=("remove the break (see torch._dynamo.explain or TORCH_LOGS="
                            "graph_breaks): avoid .item()/print/data-dependent Python control "
                            "flow in the compiled function, or move it outside"),
                gain_seconds=0.0,
                method="not estimated: the gain depends on the fusion the break prevents")

    @staticmethod
    def _region(ctx: AnalysisContext, file: str, function: str) -> list[int]:
        """The outermost nodes of the function that holds the break."""
        out = []
        for n in ctx.tree.nodes[1:]:
            f = n.frame
            if f.kind == PYTHON and f.file == file and (f.name == function
                                                          or f.name.endswith("." + function)):
                if not any(a in out for a in ctx.ancestors(n.parent)):
                    out.append(n.id)
        return out


class CompileProvenanceRule(Rule):
    id = "compile-provenance"
    category = "compile"
    description = ("Compiled kernels without the source lines they were fused from: the code "
                   "was compiled before the profile began (a note on what the profile shows).")

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        info = _info(ctx)
        missing, sites = (int(info.get(k) or 0) for k in ("kernel_calls_without_provenance",
                                                          "kernel_calls"))
        if missing <= 0:
            return
        regions = _compiled_regions(ctx)
        gpu = ctx.inc("gpu.time")
        top = max(regions, key=lambda n: max(ctx.host_time(n), gpu[n]), default=0)
        node = ctx.owner[top] if top > 0 and ctx.owner[top] > 0 else top
        yield ctx.finding(
            self, node, severity="note",
            title=f"{missing} of {sites} compiled kernel call sites have no source lines",
            message=(f"{missing} of the {sites} kernel call sites in Inductor's generated code "
                     "that the profile saw carry no source lines: their code was compiled before "
                     "the profile began, when nothing recorded where each kernel came from (or "
                     "came from a cache entry made outside a session by a program that turns on "
                     "cpp.enable_kernel_profile itself). Their time stays with the compiled "
                     f"function called at {ctx.where(node)}; on the CPU, fused C++ kernels "
                     "compiled before the profile are not timed as operators at all."),
            evidence={"kernel_call_sites": sites, "without_source_lines": missing},
            suggestion=("start profiling before the compiled function's first call (a "
                        "schedule's wait steps can cover the compilation) so that each kernel "
                        "sits under the lines fused into it"),
            gain_seconds=0.0,
            method="not a cost: what the profile can attribute")


RULES = [CompileTimeRule, RecompileChurnRule, GraphBreakRule, CompileProvenanceRule]
