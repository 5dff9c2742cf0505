"""Small helpers several rules share: grouping a function's lines, per-call estimates, units."""

from __future__ import annotations

from collections import defaultdict

from ...tree.metrics import format_value
from ..context import AnalysisContext, OpSite


def function_regions(ctx: AnalysisContext, owners: list[int]) -> list[list[int]]:
    """Group user-line nodes that are lines of one function in one calling context (siblings
    with the same file and function), so a hand-written function spread over lines is one unit."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for o in owners:
        if o <= 0:
            continue
        node = ctx.tree.nodes[o]
        groups[(node.parent, node.frame.file, node.frame.name)].append(o)
    return [sorted(g) for g in groups.values()]


def line_executions(ctx: AnalysisContext, sites: list[OpSite]) -> float:
    """How often the line ran, estimated as the count of its least-called operator (every op of
    a straight-line statement runs once per execution); 0 when it ran none."""
    counts = [ctx.count(s.node) for s in sites if ctx.count(s.node) > 0]
    return min(counts) if counts else 0.0


def calls_per_invocation(ctx: AnalysisContext, sites: list[OpSite], selected: list[OpSite]) -> float:
    """Calls of ``selected`` per execution of the line."""
    runs = line_executions(ctx, sites)
    return sum(ctx.count(s.node) for s in selected) / runs if runs else 0.0


def seconds(value: float) -> str:
    return format_value(value, "s")


def percent(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def short_op(name: str) -> str:
    return name.removeprefix("aten::")
