"""Layout churn: ``.contiguous()`` / ``reshape`` copies of transposed or permuted tensors in hot
code, paid on every step, where the consumer could read the strided view or the data could be
kept in the needed layout (channels_last for convolutions)."""

from __future__ import annotations

from collections.abc import Iterator

from ..context import AnalysisContext
from ..finding import Finding
from ..ops import LAYOUT_VIEW, base_name
from ..rule import Rule, Threshold
from ._common import percent, seconds

_COPYING = ("contiguous", "reshape", "clone")


class LayoutChurnRule(Rule):
    id = "layout-copy"
    category = "layout"
    description = ("A line of yours copies tensors into another memory layout (contiguous, "
                   "reshape of a non-viewable tensor) over and over.")
    thresholds = {
        "min_copies": Threshold(100, "a one-time layout conversion (model setup) is fine; "
                                     "100+ copies means it sits in the step"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        for owner, sites in ctx.sites_by_owner.items():
            if owner <= 0:
                continue
            copies, spent, kinds, inside = 0.0, 0.0, set(), set()
            # clone() copies whatever the layout: it is a layout change only beside a view
            # that changed the strides (x.t().clone()), else an intentional copy
            strided = any(base_name(s.name) in LAYOUT_VIEW for s in sites if not s.backward)
            for s in sites:
                if s.backward or base_name(s.name) not in _COPYING:
                    continue
                if base_name(s.name) == "clone" and not strided:
                    continue
                n = self._copies(ctx, s.node)
                if n:
                    copies += n
                    spent += ctx.host_time(s.node) + ctx.inc("gpu.time")[s.node]
                    kinds.add(base_name(s.name))
                    parent = ctx.tree.nodes[s.node].parent
                    if parent != owner:  # called inside a library function, not by the line
                        inside.add(ctx.tree.nodes[parent].frame.name)
            if copies < self.t("min_copies"):
                continue
            severity = self.severity_for(ctx, spent)
            if severity is None:
                continue
            if inside:
                severity = "note"  # the copy is the library's; the user can only work around it
            yield self._finding(ctx, owner, severity, copies, spent, kinds, sorted(inside))

    @staticmethod
    def _copies(ctx: AnalysisContext, node: int) -> float:
        """Copies a layout op really made: its nested aten::copy_ calls (an already contiguous
        tensor returns itself and shows no copy)."""
        return sum(ctx.count(n) for n in ctx.descendants(node)
                   if ctx.tree.nodes[n].frame.name == "aten::copy_")

    def _finding(self, ctx: AnalysisContext, owner: int, severity: str, copies: float,
                 spent: float, kinds: set[str], inside: list[str]) -> Finding:
        region = [o for o in ctx.sites_by_owner
                  if o > 0 and ctx.tree.nodes[o].parent == ctx.tree.nodes[owner].parent]
        views = sorted({base_name(s.name) for o in region for s in ctx.forward_sites(o)
                        if base_name(s.name) in LAYOUT_VIEW})
        conv = any("conv" in s.name for o in region for s in ctx.forward_sites(o))
        made = ", ".join(sorted(kinds))
        source = f" after {'/'.join(views)}" if views else ""
        fix = ("pass the strided view straight to the consumer (matmul/bmm/linear read "
               "transposed operands without a copy), or create the tensor in the layout you need "
               "once, outside the loop")
        if conv:
            fix = ("convert the model and its input once with .to(memory_format="
                   "torch.channels_last) instead of converting layouts every step; " + fix)
        if inside:
            fix = (f"the copies happen inside {', '.join(inside)}: pass it inputs already in the "
                   f"layout it wants (e.g. contiguous, or the layout its docs recommend), or try "
                   f"torch.compile, which can remove layout copies; " + fix)
        return ctx.finding(
            self, owner, severity=severity,
            title=f"{copies:.0f} layout copies ({made}{source}) at {ctx.where(owner)}",
            message=(f"{ctx.where(owner)} makes {copies:.0f} real copies through {made}{source}, "
                     f"{seconds(spent)} ({percent(ctx.fraction(spent))} of the run): each "
                     f"rewrites the whole tensor only to change its strides."),
            evidence={"copies": int(copies), "time_s": spent, "ops": made,
                      "views": ",".join(views), "inside": ",".join(inside)},
            suggestion=fix,
            gain_seconds=spent,
            method="upper bound: the copies' time, if the consumer reads the view directly")


RULES = [LayoutChurnRule]
