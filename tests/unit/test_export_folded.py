"""Folded stacks: one token per frame, integer values, totals equal the profile's."""

from __future__ import annotations

from _export_trees import deep_tree, hostile_tree, training_tree

from deepcontext.render.exporters import ExportOptions, get


def lines(tree, **kw) -> list[tuple[list[str], int]]:
    text = get("folded").render(tree, ExportOptions(**kw)).decode()
    out = []
    for line in text.splitlines():
        stack, value = line.rsplit(" ", 1)
        out.append((stack.split(";"), int(value)))
    return out


def test_default_metric_in_nanoseconds():
    tree = training_tree()
    rows = lines(tree)  # default metric: gpu.time
    assert sum(v for _, v in rows) == round(tree.total("gpu.time") * 1e9)
    assert rows[0] == (["[thread] MainThread", "<module> (/w/train.py:30)",
                        "train_step (/w/train.py:12)", "aten::mm", "ampere_sgemm_128x64<float>"],
                       750_000_000)


def test_counts_and_bytes_stay_as_they_are():
    tree = training_tree()
    assert [v for _, v in lines(tree, metric="memcpy.bytes")] == [4096]
    rows = lines(tree, metric="cpu.time")
    assert sum(v for _, v in rows) == 4_125_000_000
    assert len(rows) == 4


def test_hostile_names_stay_one_frame_each():
    rows = lines(hostile_tree())
    assert len(rows) == 2
    stack, value = rows[1]
    assert len(stack) == 3 and value == 1_000_000_000
    assert all("\n" not in f and "\x1b" not in f for f in stack)
    assert "\\x3b" in stack[0] and "\\x1b" in stack[0]


def test_deep_tree():
    ((stack, value),) = lines(deep_tree())
    assert len(stack) == 3000 and value == 1_000_000_000
