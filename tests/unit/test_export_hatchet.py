"""hatchet export: loaded by the real llnl-hatchet, inclusive/exclusive totals as in the profile."""

from __future__ import annotations

import json

import pytest
from _export_trees import HOSTILE, deep_tree, hostile_tree, training_tree

from deepcontext.render.exporters import ExportOptions, get
from deepcontext.render.exporters._common import inert_text


def literal(tree, **kw) -> list:
    return json.loads(get("hatchet").render(tree, ExportOptions(**kw)))


def test_literal_structure_and_totals():
    tree = training_tree()
    doc = literal(tree)
    assert isinstance(doc, list) and len(doc) == 1
    root = doc[0]
    assert root["frame"] == {"name": "<root>", "type": "root"}
    for m in tree.metric_names():
        assert root["metrics"][f"{m} (inc)"] == tree.total(m)
    count, stack = 0, [root]
    while stack:
        node = stack.pop()
        count += 1
        for m in tree.metric_names():  # inclusive = own + children's inclusive
            kids = sum(c["metrics"][f"{m} (inc)"] for c in node["children"])
            assert node["metrics"][f"{m} (inc)"] == pytest.approx(node["metrics"][m] + kids)
        stack.extend(node["children"])
    assert count == len(tree)


def test_deep_tree_is_written_iteratively():
    doc = get("hatchet").render(deep_tree(), ExportOptions())
    assert doc.count(b'"children":[') == 3001


def test_loads_in_llnl_hatchet():
    ht = pytest.importorskip("hatchet")
    tree = training_tree()
    gf = ht.GraphFrame.from_literal(literal(tree))
    df = gf.dataframe
    assert len(df) == len(tree)
    assert df["cpu.time"].sum() == tree.total("cpu.time")
    assert df["gpu.time"].sum() == tree.total("gpu.time")
    roots = gf.graph.roots
    assert len(roots) == 1
    assert df.loc[roots[0], "gpu.time (inc)"] == tree.total("gpu.time")
    kernel = df[df["name"] == "ampere_sgemm_128x64<float>"]
    assert kernel["gpu.launches"].tolist() == [3.0]
    # hatchet recomputes inclusive values from the tree: they agree with ours
    ours = gf.dataframe["cpu.time (inc)"].copy()
    gf.exc_metrics, gf.inc_metrics = ["cpu.time"], ["cpu.time (inc)"]
    gf.update_inclusive_columns()
    assert gf.dataframe["cpu.time (inc)"].tolist() == pytest.approx(ours.tolist())


def test_hostile_names_load_as_plain_strings():
    ht = pytest.importorskip("hatchet")
    gf = ht.GraphFrame.from_literal(literal(hostile_tree()))
    assert inert_text(HOSTILE) in set(gf.dataframe["name"])
    assert "\\x1b[31m" in inert_text(HOSTILE)  # gf.tree() prints names: no live ANSI escapes
