"""The viewer's data document: the tree as compact columns (strings interned, one exclusive value
array per metric), plus metric units, findings and embedded source."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

from ...tree.cct import CallingContextTree
from ...tree.frame import KINDS, Frame
from ...tree.metrics import description_of, unit_of
from ._sources import collect_sources

DOC_VERSION = 1
PROGRESS_STEP = 2048
#: metadata keys shown in the page header
META_KEYS = ("command", "host", "pid", "python", "platform", "start_time", "end_time", "complete",
             "notes", "steps", "world_size")


def load_findings(tree: CallingContextTree) -> tuple[list[dict[str, Any]], str]:
    """The analyzer's findings as dicts and a status line; the viewer works without them."""
    try:
        from ...analysis import analyze  # type: ignore[attr-defined]
    except ImportError:
        return [], "analyzer not available"
    try:
        findings = [f.to_dict() for f in analyze(tree)]
    except Exception as e:  # noqa: BLE001 - a broken rule must not take the viewer down
        print(f"deepcontext: warning: analysis failed, page has no findings ({e!r})"[:300],
              file=sys.stderr)
        return [], "analysis failed"
    return findings, f"{len(findings)} findings"


def _round(value: float) -> float | int:
    # integers stay integers in the JSON; NaN/inf (a damaged file) cannot travel in JSON
    if not math.isfinite(value) or abs(value) > 1e300:  # sums in the page must stay finite
        return 0
    return int(value) if float(value).is_integer() else value


def _finite(value: Any) -> Any:
    """Metadata with non-finite floats replaced by None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    return value


def build_document(tree: CallingContextTree, *, findings: list[dict[str, Any]] | None = None,
                   findings_status: str = "", sources: bool = True,
                   advance: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Everything the page shows, as one JSON-ready dict; ``advance(n)`` reports progress."""
    strings: dict[str, int] = {}

    def intern(text: str) -> int:
        idx = strings.get(text)
        if idx is None:
            idx = strings[text] = len(strings)
        return idx

    kind_index = {k: i for i, k in enumerate(KINDS)}
    frame_ids: dict[Frame, int] = {}
    f_kind: list[int] = []
    f_name: list[int] = []
    f_file: list[int] = []
    f_line: list[int] = []
    f_extra: dict[str, list[list[str]]] = {}
    n_parent: list[int] = []
    n_frame: list[int] = []
    metric_names = tree.metric_names()
    values: dict[str, list[float | int]] = {m: [] for m in metric_names}
    for node in tree.nodes:
        if advance is not None and node.id and node.id % PROGRESS_STEP == 0:
            advance(PROGRESS_STEP)
        fid = frame_ids.get(node.frame)
        if fid is None:
            fid = frame_ids[node.frame] = len(f_kind)
            f = node.frame
            f_kind.append(kind_index.get(f.kind, 0))
            f_name.append(intern(f.name))
            f_file.append(intern(f.file))
            f_line.append(f.line)
            if f.extra:
                f_extra[str(fid)] = [[k, v] for k, v in f.extra]
        n_parent.append(node.parent)
        n_frame.append(fid)
        for m in metric_names:
            values[m].append(_round(node.metrics.get(m, 0.0)))
    # a merged job: each rank's own exclusive values, sparse (node ids, values) per metric
    ranks = {str(r): {m: [[n for n, v in pairs], [v for n, v in pairs]]
                      for m in metric_names
                      if (pairs := sorted((n, _round(vals[m])) for n, vals in table.items()
                                          if vals.get(m)))}
             for r, table in sorted(tree.rank_metrics.items())}
    metrics = [{"name": m, "unit": unit_of(m),
                "description": description_of(m)}
               for m in metric_names]
    return {
        "version": DOC_VERSION,
        "meta": {k: _finite(tree.metadata[k]) for k in META_KEYS if k in tree.metadata},
        "kinds": list(KINDS),
        "strings": list(strings),
        "frames": {"kind": f_kind, "name": f_name, "file": f_file, "line": f_line,
                   "extra": f_extra},
        "nodes": {"parent": n_parent, "frame": n_frame},
        "metrics": metrics,
        "defaultMetric": tree.default_metric(),
        "values": values,
        "ranks": ranks,
        "findings": findings or [],
        "findingsStatus": findings_status,
        "sources": collect_sources(tree).to_dict() if sources else {"files": {}, "missing": {}},
    }
