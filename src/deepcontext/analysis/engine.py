"""Run the rules over a tree, merge duplicate findings and rank them most valuable first."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import replace

from ..tree.cct import CallingContextTree
from .context import AnalysisContext
from .finding import EstimatedGain, Finding, severity_rank
from .rule import Rule


def analyze(tree: CallingContextTree, rules: Sequence[Rule | type[Rule]] | None = None,
            min_severity: str = "note") -> list[Finding]:
    """Findings about ``tree``, sorted most valuable first, duplicates of one cause merged."""
    from .registry import default_rules

    floor = severity_rank(min_severity)
    active = default_rules() if rules is None else [r() if isinstance(r, type) else r
                                                     for r in rules]
    ctx = AnalysisContext(tree)
    found: list[Finding] = []
    for rule in active:
        # a broken (user) rule must not hide the other rules' findings
        try:
            found.extend(rule.check(ctx))
        except Exception as e:  # noqa: BLE001
            warnings.warn(f"rule {rule.id} failed: {type(e).__name__}: {e}", stacklevel=2)
    merged = merge_duplicates(found)
    kept = [f for f in merged if severity_rank(f.severity) >= floor]
    return sorted(kept, key=rank_key)


def rank_key(f: Finding) -> tuple:
    """Most serious first, then the largest estimated gain, then stable by rule and node."""
    return (-severity_rank(f.severity), -f.estimated_gain.seconds, f.rule, f.node)


def merge_duplicates(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per (rule, user line, library origin): the same cause reached through
    several call paths (or forward and backward) is reported once, with the gains added up;
    two library chains under one user line stay two findings."""
    groups: dict[tuple, list[Finding]] = {}
    for f in findings:
        key = (f.rule, f.location, f.origin) if f.location else (f.rule, f.node)
        groups.setdefault(key, []).append(f)
    out = []
    for group in groups.values():
        group.sort(key=rank_key)
        head = group[0]
        if len(group) > 1:
            seconds = sum(g.estimated_gain.seconds for g in group)
            fraction = min(1.0, sum(g.estimated_gain.fraction for g in group))
            evidence = dict(head.evidence)
            evidence["merged_contexts"] = len(group)
            head = replace(head, evidence=evidence,
                           estimated_gain=EstimatedGain(seconds, fraction, head.estimated_gain.method),
                           merged_nodes=[g.node for g in group[1:]])
        out.append(head)
    return out
