"""speedscope's file format (https://www.speedscope.app/file-format-schema.json): one "sampled"
profile per metric, each stack weighted by the exclusive value of its context."""

from __future__ import annotations

import json
from typing import Any

from ...tree.cct import CallingContextTree
from ...tree.frame import PYTHON, Frame
from ...tree.metrics import unit_of
from . import ExportOptions
from ._common import (
    chosen_metrics,
    display_name,
    finite_tree,
    inert_text,
    profile_title,
    walk_paths,
)

SCHEMA_URL = "https://www.speedscope.app/file-format-schema.json"
#: our units -> speedscope's ValueUnit
UNITS = {"s": "seconds", "bytes": "bytes", "count": "none"}


def _frame_doc(frame: Frame) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": display_name(frame)}
    if frame.file:
        doc["file"] = inert_text(frame.file)
    if frame.kind == PYTHON and frame.line > 0:
        doc["line"] = frame.line
    return doc


class SpeedscopeExporter:
    name = "speedscope"
    extensions = (".speedscope.json",)
    description = "speedscope JSON (one sampled profile per metric)"

    def render(self, tree: CallingContextTree, options: ExportOptions) -> bytes:
        """The speedscope document as UTF-8 JSON."""
        tree = finite_tree(tree)
        metrics = chosen_metrics(tree, options)
        frame_index: dict[Frame, int] = {}
        frames: list[dict[str, Any]] = []
        node_frame: dict[int, int] = {}
        samples: dict[str, list[list[int]]] = {m: [] for m in metrics}
        weights: dict[str, list[float]] = {m: [] for m in metrics}
        for node, path in walk_paths(tree, options):
            idx = frame_index.get(node.frame)
            if idx is None:
                idx = frame_index[node.frame] = len(frames)
                frames.append(_frame_doc(node.frame))
            node_frame[node.id] = idx
            stack: list[int] | None = None
            for m in metrics:
                value = node.metrics.get(m, 0.0)
                if value:
                    if stack is None:
                        stack = [node_frame[i] for i in path]
                    samples[m].append(stack)
                    weights[m].append(value)
        title = profile_title(tree)
        profiles = []
        for m in metrics:
            total = sum(weights[m])
            profiles.append({
                "type": "sampled",
                "name": f"{inert_text(m)} - {title}",
                "unit": UNITS.get(unit_of(m), "none"),
                "startValue": 0,
                "endValue": total,
                "samples": samples[m],
                "weights": weights[m],
            })
        doc = {
            "$schema": SCHEMA_URL,
            "version": "0.7.1",
            "name": title,
            "exporter": "deepcontext",
            "activeProfileIndex": 0,
            "shared": {"frames": frames},
            "profiles": profiles,
        }
        return json.dumps(doc, ensure_ascii=True, separators=(",", ":")).encode()


EXPORTER = SpeedscopeExporter()
