"""The JSON report: a documented, stable schema for scripts (docs/report-json.md)."""

from __future__ import annotations

import json
from typing import Any

from ..tree.cct import CallingContextTree
from ..tree.metrics import unit_of
from ..tree.views import FlatRow

SCHEMA = "deepcontext.report/1"


def tree_document(tree: CallingContextTree, metric: str, *, depth: int | None = None,
                  threshold: float = 0.0, view: str = "top-down") -> dict[str, Any]:
    names = tree.metric_names()
    incs = {m: tree.inclusive_all(m) for m in names}
    total = incs[metric][0] if metric in incs else 0.0
    limit = threshold * total

    def node_doc(nid: int, d: int) -> dict[str, Any]:
        n = tree.nodes[nid]
        doc: dict[str, Any] = {
            "id": nid,
            "frame": n.frame.to_dict(),
            "metrics": {m: v for m, v in sorted(n.metrics.items()) if v},
            "inclusive": {m: incs[m][nid] for m in names if incs[m][nid]},
            "children": [],
        }
        if depth is None or d < depth:
            kids = sorted(n.children, key=lambda c: -incs[metric][c] if metric in incs else 0)
            doc["children"] = [node_doc(c, d + 1) for c in kids
                               if limit == 0 or (metric in incs and incs[metric][c] > limit)]
        return doc

    return {
        "schema": SCHEMA,
        "view": view,
        "metric": metric,
        "units": {m: unit_of(m) for m in names},
        "totals": {m: incs[m][0] for m in names},
        "metadata": tree.metadata,
        "tree": node_doc(0, 0),
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
    # ensure_ascii keeps lone surrogates and control characters as inert \u escapes.
    return json.dumps(doc, indent=1, ensure_ascii=True, default=str)
