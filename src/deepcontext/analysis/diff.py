"""Compare two profiles context by context, to prove that a fix paid off.

Contexts are the user's lines: each node's exclusive metrics go to its deepest user frame, and
a line is identified by the path of user frames above it (file relative to the program's root,
function, line), so the same program recorded twice, even from another checkout, matches up.
``match="function"`` drops line numbers, for code edited between the two runs.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from ..tree.cct import CallingContextTree
from ..tree.frame import KERNEL
from .context import AnalysisContext

OUTSIDE = ("(outside your code)",)


@dataclass
class ContextDiff:
    """One user line (context) in both profiles."""

    key: tuple
    label: str
    before: dict[str, float] = field(default_factory=dict)
    after: dict[str, float] = field(default_factory=dict)
    ops_before: Counter = field(default_factory=Counter)
    ops_after: Counter = field(default_factory=Counter)
    kernels_before: Counter = field(default_factory=Counter)
    kernels_after: Counter = field(default_factory=Counter)
    #: merged multi-rank profiles: rank -> metric -> value, each rank's own
    ranks_before: dict[int, dict[str, float]] = field(default_factory=dict)
    ranks_after: dict[int, dict[str, float]] = field(default_factory=dict)

    def delta(self, metric: str) -> float:
        return self.after.get(metric, 0.0) - self.before.get(metric, 0.0)

    def changed_ops(self) -> dict[str, tuple[float, float]]:
        names = set(self.ops_before) | set(self.ops_after)
        return {n: (self.ops_before[n], self.ops_after[n]) for n in sorted(names)
                if self.ops_before[n] != self.ops_after[n]}

    def changed_kernels(self) -> dict[str, tuple[float, float]]:
        names = set(self.kernels_before) | set(self.kernels_after)
        return {n: (self.kernels_before[n], self.kernels_after[n]) for n in sorted(names)
                if self.kernels_before[n] != self.kernels_after[n]}


@dataclass
class ProfileDiff:
    metric: str
    totals_before: dict[str, float]
    totals_after: dict[str, float]
    time_before: float  # profiled time outside imports (as the analyzer counts it)
    time_after: float
    wall_before: float
    wall_after: float
    contexts: list[ContextDiff]

    @property
    def speedup(self) -> float:
        """before / after of the chosen metric's total (>1 means faster)."""
        a = self.totals_after.get(self.metric, 0.0)
        return self.totals_before.get(self.metric, 0.0) / a if a > 0 else float("inf")


def _user_root(ctx: AnalysisContext) -> str:
    files = {ctx.tree.nodes[o].frame.file for o in ctx.user_nodes()
             if ctx.tree.nodes[o].frame.file.startswith("/")}
    if not files:
        return ""
    return os.path.commonpath([os.path.dirname(f) for f in files])


def _main_script(ctx: AnalysisContext) -> str:
    """The program's own script: the file of the outermost user frame, preferring a
    ``<module>`` frame (the script run as ``__main__``)."""
    outermost = []
    for owner in ctx.user_nodes():
        outer = next(n for n in ctx.ancestors(owner) if ctx.owner[n] == n)
        outermost.append(ctx.tree.nodes[outer].frame)
    for f in outermost:
        if f.name == "<module>":
            return f.file
    return outermost[0].file if outermost else ""


def _keys(ctx: AnalysisContext, match: str) -> dict[int, tuple[tuple, str]]:
    """The key and display label of every user line node: the user frames on its path,
    outermost first. The main script is keyed as ``<main>`` so ``train.py`` and a fixed copy
    ``train_fixed.py`` still match line by line."""
    root, main = _user_root(ctx), _main_script(ctx)
    keys: dict[int, tuple[tuple, str]] = {}
    for owner in ctx.user_nodes():
        parts, labels = [], []
        for nid in ctx.ancestors(owner):
            if ctx.owner[nid] != nid:
                continue
            f = ctx.tree.nodes[nid].frame
            file = os.path.relpath(f.file, root) if root and f.file.startswith("/") else f.file
            key_file = "<main>" if f.file == main else file
            parts.append((key_file, f.name) if match == "function" else (key_file, f.name, f.line))
            labels.append(f"{f.name} ({file})" if match == "function" else
                          f"{f.name} ({file}:{f.line})")
        keys[owner] = (tuple(parts), " > ".join(labels))
    return keys


def _collect(tree: CallingContextTree, match: str, side: str,
             rows: dict[tuple, ContextDiff]) -> None:
    ctx = AnalysisContext(tree)
    keys = _keys(ctx, match)
    for node in tree.nodes[1:]:
        if not node.metrics:
            continue
        key, label = keys.get(ctx.owner[node.id], (OUTSIDE, OUTSIDE[0]))
        row = rows.get(key)
        if row is None:
            row = rows[key] = ContextDiff(key, label)
        values = row.before if side == "before" else row.after
        for metric, value in node.metrics.items():
            values[metric] = values.get(metric, 0.0) + value
        ranks = row.ranks_before if side == "before" else row.ranks_after
        for rank, table in tree.rank_metrics.items():
            own = ranks.setdefault(rank, {})
            for metric, value in table.get(node.id, {}).items():
                own[metric] = own.get(metric, 0.0) + value
        if node.frame.kind == KERNEL:
            kernels = row.kernels_before if side == "before" else row.kernels_after
            kernels[node.frame.name] += node.metrics.get("gpu.launches", 0.0)
    for site in ctx.op_sites:
        key, label = keys.get(site.owner, (OUTSIDE, OUTSIDE[0]))
        row = rows.setdefault(key, ContextDiff(key, label))
        ops = row.ops_before if side == "before" else row.ops_after
        ops[site.name] += ctx.count(site.node)


def diff_profiles(before: CallingContextTree, after: CallingContextTree,
                  metric: str | None = None, match: str = "exact") -> ProfileDiff:
    """Per-context and total changes from ``before`` to ``after``."""
    rows: dict[tuple, ContextDiff] = {}
    _collect(before, match, "before", rows)
    _collect(after, match, "after", rows)
    names = sorted(set(before.metric_names()) | set(after.metric_names()))
    metric = metric or before.default_metric()
    ctx_b, ctx_a = AnalysisContext(before), AnalysisContext(after)
    contexts = sorted(rows.values(), key=lambda r: (-abs(r.delta(metric)), r.label))
    return ProfileDiff(metric=metric,
                       totals_before={m: before.total(m) for m in names},
                       totals_after={m: after.total(m) for m in names},
                       time_before=ctx_b.profiled_time, time_after=ctx_a.profiled_time,
                       wall_before=ctx_b.wall_time, wall_after=ctx_a.wall_time,
                       contexts=contexts)


def significant(d: ProfileDiff, threshold: float) -> list[ContextDiff]:
    """Contexts whose metric changed by at least ``threshold`` of the larger total, or whose
    operator or kernel counts changed when the metric is a count."""
    scale = max(d.totals_before.get(d.metric, 0.0), d.totals_after.get(d.metric, 0.0))
    return [c for c in d.contexts if scale > 0 and abs(c.delta(d.metric)) >= threshold * scale
            and abs(c.delta(d.metric)) > 0]

