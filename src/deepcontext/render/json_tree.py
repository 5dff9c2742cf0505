"""The JSON report: a documented, stable schema for scripts (docs/report-json.md)."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from ..tree.cct import CallingContextTree
from ..tree.metrics import unit_of
from ..tree.profile_file import MAX_DEPTH
from ..tree.views import FlatRow

SCHEMA = "deepcontext.report/1"


def tree_document(tree: CallingContextTree, metric: str, *, depth: int | None = None,
                  threshold: float = 0.0, view: str = "top-down") -> dict[str, Any]:
    names = tree.metric_names()
    incs = {m: tree.inclusive_all(m) for m in names}
    total = incs[metric][0] if metric in incs else 0.0
    limit = threshold * total
    rank_incs = {r: {m: tree.rank_inclusive_all(m, r) for m in names} for r in tree.ranks()}

    def node_doc(nid: int) -> dict[str, Any]:
        n = tree.nodes[nid]
        doc = {
            "id": nid,
            "frame": n.frame.to_dict(),
            "metrics": {m: v for m, v in sorted(n.metrics.items()) if v},
            "inclusive": {m: incs[m][nid] for m in names if incs[m][nid]},
            "children": [],
        }
        if rank_incs:  # a merged job: each rank's own inclusive values (docs/report-json.md)
            doc["rank_inclusive"] = {str(r): {m: v[nid] for m, v in by_metric.items() if v[nid]}
                                     for r, by_metric in rank_incs.items()}
        return doc

    # Iterative, so a deep tree cannot exhaust Python's recursion limit.
    root = node_doc(0)
    stack = [(root, 0, 0)]
    while stack:
        doc, nid, d = stack.pop()
        if depth is not None and d >= depth:
            continue
        kids = sorted(tree.nodes[nid].children,
                      key=lambda c: -incs[metric][c] if metric in incs else 0)
        for c in kids:
            if limit == 0 or (metric in incs and incs[metric][c] > limit):
                child = node_doc(c)
                doc["children"].append(child)
                stack.append((child, c, d + 1))

    return {
        "schema": SCHEMA,
        "view": view,
        "metric": metric,
        "units": {m: unit_of(m) for m in names},
        "totals": {m: incs[m][0] for m in names},
        "metadata": tree.metadata,
        "tree": root,
    }


def flat_document(tree: CallingContextTree, rows: list[FlatRow], metric: str) -> dict[str, Any]:
    names = tree.metric_names()
    rows = sorted(rows, key=lambda r: -r.exclusive.get(metric, 0.0))
    return {
        "schema": SCHEMA,
        "view": "flat",
        "metric": metric,
        "units": {m: unit_of(m) for m in names},
        "totals": {m: tree.total(m) for m in names},
        "metadata": tree.metadata,
        "rows": [{"frame": r.frame.to_dict(), "exclusive": r.exclusive, "inclusive": r.inclusive}
                 for r in rows],
    }


def dumps(doc: dict[str, Any]) -> str:
    """The document as JSON text: ASCII only, so lone surrogates and control characters stay
    inert ``\\u`` escapes; non-finite numbers become null (JSON has no NaN)."""
    limit = sys.getrecursionlimit()
    # The encoder nests two levels per tree level; the reader caps trees at 512 levels.
    sys.setrecursionlimit(max(limit, 4 * MAX_DEPTH + 100))
    try:
        try:
            return json.dumps(doc, indent=1, ensure_ascii=True, default=str, allow_nan=False)
        except ValueError:  # rare (sums that overflow): copy with the offenders replaced
            return json.dumps(_finite(doc), indent=1, ensure_ascii=True, default=str,
                              allow_nan=False)
    finally:
        sys.setrecursionlimit(limit)


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None (only copies what it must)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        if any(isinstance(v, (float, dict, list)) for v in value.values()):
            return {k: _finite(v) for k, v in value.items()}
        return value
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
