"""Serializing operators: scatter/index accumulation that deterministic mode turns into a sort,
and sort-based operators (unique, sort) where an O(n) atomic alternative exists."""

from __future__ import annotations

from collections.abc import Iterator

from ...tree.frame import KERNEL, OP
from ..context import AnalysisContext
from ..finding import Finding
from ..ops import SCATTER, SORT_BASED, base_name
from ..rule import Rule, Threshold
from ._common import percent, seconds


class SerializationRule(Rule):
    id = "serialized-op"
    category = "serialization"
    description = ("Scatter/index_put accumulation serialized through a sort (deterministic "
                   "algorithms), or sort-based unique/sort in hot code.")
    thresholds = {
        "min_calls": Threshold(10, "a sort run once (preprocessing) is not hot code"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        for site in ctx.op_sites:
            if site.owner <= 0:
                continue
            name = base_name(site.name)
            if name in SCATTER:
                yield from self._sorted_scatter(ctx, site.node, site.owner, name)
            elif name in SORT_BASED and not site.backward:
                yield from self._sort_based(ctx, site.node, site.owner, name)

    def _sorted_scatter(self, ctx: AnalysisContext, node: int, owner: int,
                        name: str) -> Iterator[Finding]:
        sorts = [n for n in ctx.descendants(node)[1:] if self._is_sort(ctx, n)]
        if not sorts:
            return
        spent = sum(ctx.host_time(n) + ctx.inc("gpu.time")[n] for n in sorts
                    if not any(a in sorts for a in ctx.ancestors(ctx.tree.nodes[n].parent)))
        severity = self.severity_for(ctx, spent)
        if severity is None:
            return
        yield ctx.finding(
            self, node, severity=severity,
            title=f"{name} at {ctx.where(owner)} is serialized through a sort",
            message=(f"{name} at {ctx.where(owner)} sorts its indices before accumulating "
                     f"(the deterministic implementation), {seconds(spent)} "
                     f"({percent(ctx.fraction(spent))} of the run) in the sort alone."),
            evidence={"calls": int(ctx.count(node)), "sort_time_s": spent},
            suggestion=("if bitwise reproducibility is not needed here, let it use atomics: "
                        "torch.use_deterministic_algorithms(False) around this op (or "
                        "warn_only=True); otherwise reformulate without duplicate-index "
                        "accumulation (torch.bincount(idx, weights), one-hot matmul, or "
                        "torch.segment_reduce on sorted segments)"),
            gain_seconds=spent,
            method="the sort's time, which an atomic accumulation does not need")

    def _sort_based(self, ctx: AnalysisContext, node: int, owner: int,
                    name: str) -> Iterator[Finding]:
        calls = ctx.count(node)
        if calls < self.t("min_calls"):
            return
        spent = ctx.host_time(node) + ctx.inc("gpu.time")[node]
        if self.severity_for(ctx, spent) is None:
            return
        alt = ("torch.topk(x, k) when only the k largest are used" if name in ("sort", "argsort",
                                                                               "msort")
               else "torch.bincount(x, minlength=n) (or scatter_add_) when values are small "
                    "non-negative integers: O(n) with atomics, no sort and no GPU sync")
        yield ctx.finding(
            self, node, severity="note",  # sorting is often exactly what is needed
            title=f"sort-based {name} called {calls:.0f} times at {ctx.where(owner)}",
            message=(f"{name} at {ctx.where(owner)} sorts its input on each of {calls:.0f} calls, "
                     f"{seconds(spent)} ({percent(ctx.fraction(spent))} of the run)."),
            evidence={"calls": int(calls), "time_s": spent},
            suggestion=f"if the full sort is not needed, use {alt}",
            gain_seconds=spent,
            method="upper bound: the sort-based op's time")

    @staticmethod
    def _is_sort(ctx: AnalysisContext, n: int) -> bool:
        f = ctx.tree.nodes[n].frame
        if f.kind == OP:
            return base_name(f.name) in SORT_BASED
        return f.kind == KERNEL and ("sort" in f.name.lower() or "radix" in f.name.lower())


RULES = [SerializationRule]
