"""Hotspots: the user's lines that own the most time (their own code plus the library code,
operators and kernels below them), the place to look first."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator

from ...tree.frame import KERNEL, OP
from ..context import AnalysisContext
from ..finding import Finding
from ..rule import Rule, Threshold
from ._common import callable_name, percent, seconds


class HotspotRule(Rule):
    id = "hotspot"
    category = "hotspot"
    description = ("The lines of your code that own the largest share of the time (GPU time when "
                   "the profile has it, else host time), with the operator or kernel that "
                   "dominates each. Always a note: being hot is not a defect.")
    thresholds = {
        "min_share": Threshold(0.10, "a line under 10% of the run is not where a first look pays"),
        "max_findings": Threshold(5, "the top few lines; the report command shows the rest"),
        "min_samples": Threshold(3, "CPU time is sampled: a line seen in one or two samples "
                                    "(one interval each) is noise, whatever its share"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        metric = self._metric(ctx)
        owned: dict[int, float] = defaultdict(float)
        top_leaf: dict[int, tuple[float, int]] = {}
        for node in ctx.tree.nodes[1:]:
            value = ctx.steady_value(node, metric)
            owner = ctx.owner[node.id]
            if value <= 0 or owner <= 0 or ctx.in_import[node.id] or ctx.in_setup[node.id] or (
                    ctx.in_worker[node.id]):  # (beside the line's thread: profiled_time's rule)
                continue
            owned[owner] += value
            leaf = self._leaf(ctx, node.id, owner)
            if leaf is not None and value > top_leaf.get(owner, (0.0, -1))[0]:
                top_leaf[owner] = (value, leaf)
        total = sum(owned.values())
        by_line: dict[tuple, list[int]] = defaultdict(list)
        for owner in owned:
            by_line[ctx.location(owner)].append(owner)
        ranked = sorted(by_line.values(), key=lambda owners: -sum(owned[o] for o in owners))
        interval = ctx.metadata.get("sample_interval") if metric == "cpu.time" else None
        floor = self.t("min_samples") * interval if isinstance(interval, (int, float)) else 0.0
        for owners in ranked[:int(self.t("max_findings"))]:
            value = sum(owned[o] for o in owners)
            if total <= 0 or value / total < self.t("min_share") or value < floor * (1 - 1e-9):
                break
            node = max(owners, key=lambda o: owned[o])
            yield self._finding(ctx, node, metric, value, value / total, top_leaf.get(node))

    @staticmethod
    def _metric(ctx: AnalysisContext) -> str:
        """GPU time when present; else whichever host metric saw more of the steady state
        (sampling at a coarse interval can miss most of a short run; op.time misses Python)."""
        if ctx.has_gpu and ctx.tree.total("gpu.time") > 0:
            return "gpu.time"
        times = ctx.profiled_times
        return "cpu.time" if times["cpu.time"] >= times["op.time"] else "op.time"

    @staticmethod
    def _leaf(ctx: AnalysisContext, node: int, owner: int) -> int | None:
        """The operator or kernel a sample landed in (the innermost such frame on its path),
        below the line: an operator above it (a DataLoader's record_function scope around the
        user's ``__getitem__``) is what called the line, not what the line spends in."""
        for nid in reversed(ctx.ancestors(node)):
            if nid == owner:
                return None
            if ctx.tree.nodes[nid].frame.kind in (OP, KERNEL):
                return nid
        return None

    def _finding(self, ctx: AnalysisContext, node: int, metric: str, value: float, share: float,
                 leaf: tuple[float, int] | None) -> Finding:
        loc = ctx.location(node)
        assert loc is not None
        short = loc.file.rsplit("/", 1)[-1]
        inner = ""
        if leaf is not None:
            frame = ctx.tree.nodes[leaf[1]].frame
            side = " (in backward)" if ctx.in_backward[leaf[1]] else ""
            lead = "Most of it" if leaf[0] >= 0.5 * value else "The largest part"
            inner = f" {lead} is in {frame.name}{side}: {percent(leaf[0] / value)} of the line."
        return ctx.finding(
            self, node, severity="note",
            title=f"{short}:{loc.line} ({callable_name(loc.function)}) owns {percent(share)} of "
                  f"{metric}",
            message=(f"{callable_name(loc.function)} at {short}:{loc.line} owns {seconds(value)} of {metric} "
                     f"({percent(share)} of the time attributed to your code), counting the "
                     f"library code, operators and kernels it calls.{inner}"),
            evidence={metric: value, "share": round(share, 4),
                      **({"top_frame_" + metric: leaf[0]} if leaf else {})},
            suggestion=(f"Start optimizing here; see its subtree with `deepcontext report PROFILE "
                        f"--include '{re.escape(f'{short}:{loc.line}')}\\)'` and check the other "
                        f"findings for this line."),
            gain_seconds=value,
            method="upper bound: the line's own time if it were removed entirely")


RULES = [HotspotRule]
