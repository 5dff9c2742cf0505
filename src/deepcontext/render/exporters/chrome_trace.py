"""Chrome / Perfetto trace-event JSON: a synthetic timeline of the aggregated tree.

A profile holds totals per calling context, not timestamps, so this is not a replay of the run.
It is the flame graph laid out as a trace: every node is one complete ("X") event whose
duration is its inclusive time; its children follow one another from the parent's start in the
order they were first seen, and its own (exclusive) time comes last. Thread frames under the
root become separate tracks. Only time metrics make sense here.
"""

from __future__ import annotations

import json
from typing import Any

from ...errors import DeepContextError
from ...tree.cct import CallingContextTree
from ...tree.frame import PYTHON, THREAD
from ...tree.metrics import unit_of
from . import ExportOptions
from ._common import (
    PROGRESS_STEP,
    chosen_metrics,
    display_name,
    finite_tree,
    inert_text,
    profile_title,
    scaled_int,
)

NS_PER_S = 1_000_000_000


def _time_metric(tree: CallingContextTree, options: ExportOptions) -> str:
    if options.metric is not None:
        chosen_metrics(tree, options)  # a metric the profile lacks: the same error as elsewhere
        if unit_of(options.metric) != "s":
            raise DeepContextError(
                f"the trace format needs a time metric; {options.metric!r} is not one")
        return options.metric
    default = tree.default_metric()
    if unit_of(default) == "s":
        return default
    for m in tree.metric_names():
        if unit_of(m) == "s" and tree.total(m) > 0:
            return m
    raise DeepContextError("this profile has no time metric to lay out as a trace")


def durations_ns(tree: CallingContextTree, metric: str) -> list[int]:
    """Inclusive durations in integer nanoseconds, summed from rounded exclusive values so that
    children always fit exactly inside their parent."""
    dur = [scaled_int(n.metrics.get(metric, 0.0), NS_PER_S) for n in tree.nodes]
    for n in reversed(tree.nodes):  # children always have larger ids than their parent
        if n.parent >= 0:
            dur[n.parent] += dur[n.id]
    return dur


class ChromeTraceExporter:
    name = "trace"
    extensions = (".trace.json", ".perfetto.json")
    description = "Chrome/Perfetto trace JSON: the tree as a synthetic timeline (one time metric)"

    def render(self, tree: CallingContextTree, options: ExportOptions) -> bytes:
        """The trace-event document (``traceEvents`` plus metadata)."""
        tree = finite_tree(tree)
        metric = _time_metric(tree, options)
        dur = durations_ns(tree, metric)
        events: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
             "args": {"name": profile_title(tree)}}]
        tracks: dict[int, int] = {}  # root child id -> tid, for thread frames
        main_cursor = 0
        stack: list[tuple[int, int, int]] = []  # (node, start ns, tid)
        for child in tree.nodes[0].children:
            node = tree.nodes[child]
            if node.frame.kind == THREAD:
                tid = tracks[child] = len(tracks) + 1
                events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                               "args": {"name": display_name(node.frame)}})
                stack.append((child, 0, tid))
            else:
                stack.append((child, main_cursor, 0))
                main_cursor += dur[child]
        stack.reverse()
        done = 0
        while stack:
            nid, start, tid = stack.pop()
            done += 1
            if options.advance is not None and done % PROGRESS_STEP == 0:
                options.advance(PROGRESS_STEP)
            if dur[nid] <= 0:
                continue
            node = tree.nodes[nid]
            args: dict[str, Any] = {inert_text(k): v for k, v in sorted(node.metrics.items()) if v}
            if node.frame.file:
                args["file"] = inert_text(node.frame.file)
                if node.frame.kind == PYTHON:
                    args["line"] = node.frame.line
            events.append({"name": display_name(node.frame), "cat": inert_text(node.frame.kind), "ph": "X",
                           "ts": start / 1000, "dur": dur[nid] / 1000, "pid": 1, "tid": tid,
                           "args": args})
            cursor = start
            placed = []
            for c in node.children:
                placed.append((c, cursor, tid))
                cursor += dur[c]
            stack.extend(reversed(placed))
        if options.advance is not None:
            options.advance(done % PROGRESS_STEP)
        doc = {
            "traceEvents": events,
            "displayTimeUnit": "ms",
            "otherData": {"generator": "deepcontext", "metric": inert_text(metric),
                          "note": "synthetic timeline of aggregated totals, not a replay"},
        }
        return json.dumps(doc, ensure_ascii=True, separators=(",", ":")).encode()


EXPORTER = ChromeTraceExporter()
