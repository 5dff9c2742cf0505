"""Chrome/Perfetto trace: a synthetic timeline whose events nest exactly like the tree."""

from __future__ import annotations

import json

import pytest
from _export_trees import training_tree

from deepcontext.errors import DeepContextError
from deepcontext.render.exporters import ExportOptions, get


def trace(tree, **kw) -> dict:
    return json.loads(get("trace").render(tree, ExportOptions(**kw)))


def slices(doc) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def test_thread_tracks_and_totals():
    tree = training_tree()
    doc = trace(tree, metric="cpu.time")
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"[thread] MainThread", "[thread] Loader"}
    tops = [e for e in slices(doc) if e["name"].startswith("[thread]")]
    assert sum(e["dur"] for e in tops) * 1000 == pytest.approx(tree.total("cpu.time") * 1e9)
    assert all(e["ts"] == 0 for e in tops)
    assert doc["otherData"]["metric"] == "cpu.time"


def test_children_nest_inside_parents_per_track():
    doc = trace(training_tree(), metric="cpu.time")
    by_tid: dict[int, list[dict]] = {}
    for e in slices(doc):
        by_tid.setdefault(e["tid"], []).append(e)
    for events in by_tid.values():
        # proper nesting: sorted by start (longer first), every slice fits in the open ones
        events.sort(key=lambda e: (round(e["ts"] * 1000), -round(e["dur"] * 1000)))
        open_ends: list[int] = []
        for e in events:
            start, end = round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1]
            open_ends.append(end)


def test_zero_time_nodes_are_left_out_and_args_carry_metrics():
    doc = trace(training_tree(), metric="gpu.time")
    names = [e["name"] for e in slices(doc)]
    assert "read" not in names  # the loader thread spent no GPU time
    kernel = next(e for e in slices(doc) if e["name"] == "ampere_sgemm_128x64<float>")
    assert kernel["dur"] == 750_000 and kernel["cat"] == "kernel"
    assert kernel["args"] == {"gpu.launches": 3.0, "gpu.time": 0.75}


def test_non_time_metric_is_refused():
    with pytest.raises(DeepContextError, match="time metric"):
        trace(training_tree(), metric="memcpy.bytes")
