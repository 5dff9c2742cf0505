"""Hatchet's literal format (``GraphFrame.from_literal``): nested ``{"frame", "metrics",
"children"}`` objects, each metric as ``name`` (exclusive) and ``name (inc)`` (inclusive), the
convention hatchet and Triton Proton's viewer read."""

from __future__ import annotations

import json
from typing import Any

from ...tree.cct import CallingContextTree
from ...tree.frame import Frame
from . import ExportOptions
from ._common import PROGRESS_STEP, chosen_metrics, display_name, finite_tree, inert_text

_dumps = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


def _frame_doc(frame: Frame) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": display_name(frame), "type": inert_text(frame.kind)}
    if frame.file:
        doc["file"] = inert_text(frame.file)
    if frame.line:
        doc["line"] = frame.line
    return doc


class HatchetExporter:
    name = "hatchet"
    extensions = (".hatchet.json",)
    description = "hatchet literal JSON (llnl-hatchet GraphFrame.from_literal, Proton viewer)"

    def render(self, tree: CallingContextTree, options: ExportOptions) -> bytes:
        """The literal list with one root, written iteratively (deep trees cannot overflow)."""
        tree = finite_tree(tree)
        metrics = chosen_metrics(tree, options)
        incs = {m: tree.inclusive_all(m) for m in metrics}
        out: list[str] = ["["]
        # (node id, closing?) pairs: a node opens its object, then its children, then closes.
        stack: list[tuple[int, bool]] = [(0, False)]
        first_child = [True]  # per open level: is the next child the first one?
        done = 0
        while stack:
            nid, closing = stack.pop()
            if closing:
                out.append("]}")
                first_child.pop()
                continue
            if not first_child[-1]:
                out.append(",")
            first_child[-1] = False
            node = tree.nodes[nid]
            values: dict[str, float] = {}
            for m in metrics:
                values[inert_text(m)] = node.metrics.get(m, 0.0)
                values[f"{inert_text(m)} (inc)"] = incs[m][nid]
            out.append('{"frame":' + _dumps(_frame_doc(node.frame)) + ',"metrics":'
                       + _dumps(values) + ',"children":[')
            first_child.append(True)
            stack.append((nid, True))
            stack.extend((c, False) for c in reversed(node.children))
            done += 1
            if options.advance is not None and done % PROGRESS_STEP == 0:
                options.advance(PROGRESS_STEP)
        if options.advance is not None:
            options.advance(done % PROGRESS_STEP)
        out.append("]")
        return "".join(out).encode()


EXPORTER = HatchetExporter()
