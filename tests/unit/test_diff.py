"""diff on literal trees: contexts matched by user-frame paths, totals, speedup, CLI output."""

import json

import pytest

from deepcontext.analysis.diff import diff_profiles, significant
from deepcontext.analysis.testing import build, kernel, op, user
from deepcontext.cli.main import main
from deepcontext.tree.profile_file import save

BEFORE_FILE, AFTER_FILE = "/a/run1/train.py", "/b/run2/train_fixed.py"


def before_tree(file=BEFORE_FILE):
    return build([
        ([user(10, "main", file), user(4, "gelu", file), op("aten::mul")],
         {"op.count": 600, "op.time": 0.3}),
        ([user(10, "main", file), user(4, "gelu", file), op("aten::mul"), kernel("elementwise")],
         {"gpu.time": 0.2, "gpu.launches": 600}),
        ([user(11, "main", file), op("aten::addmm")], {"op.count": 100, "op.time": 0.5}),
    ])


def after_tree(file=AFTER_FILE):
    return build([
        ([user(10, "main", file), user(4, "gelu", file), op("aten::gelu")],
         {"op.count": 100, "op.time": 0.05}),
        ([user(10, "main", file), user(4, "gelu", file), op("aten::gelu"), kernel("gelu_kernel")],
         {"gpu.time": 0.02, "gpu.launches": 100}),
        ([user(11, "main", file), op("aten::addmm")], {"op.count": 100, "op.time": 0.5}),
    ])


def test_contexts_match_across_checkouts_and_renamed_main_script():
    d = diff_profiles(before_tree(), after_tree(), metric="op.time")
    gelu = d.contexts[0]
    assert gelu.label == "main (train.py:10) > gelu (train.py:4)"
    assert gelu.before["op.time"] == 0.3 and gelu.after["op.time"] == 0.05
    assert gelu.changed_ops() == {"aten::mul": (600, 0), "aten::gelu": (0, 100)}
    assert gelu.changed_kernels() == {"elementwise": (600, 0), "gelu_kernel": (0, 100)}
    addmm = next(c for c in d.contexts if c.key[-1][2] == 11)
    assert addmm.delta("op.time") == 0
    assert len(d.contexts) == 2
    assert d.speedup == pytest.approx(0.8 / 0.55)


def test_significant_uses_the_threshold_of_the_total():
    d = diff_profiles(before_tree(), after_tree(), metric="op.time")
    assert [c.key[-1][2] for c in significant(d, 0.01)] == [4]
    assert significant(d, 0.5) == []


def test_function_match_ignores_line_numbers():
    shifted = build([([user(12, "main", AFTER_FILE), user(6, "gelu", AFTER_FILE), op("aten::gelu")],
                      {"op.count": 100, "op.time": 0.05})])
    exact = diff_profiles(before_tree(), shifted, metric="op.time")
    assert all(not (c.before and c.after) for c in exact.contexts)
    by_fn = diff_profiles(before_tree(), shifted, metric="op.time", match="function")
    gelu = next(c for c in by_fn.contexts if c.key[-1][1] == "gelu")
    assert gelu.before["op.time"] == 0.3 and gelu.after["op.time"] == 0.05


def test_cli_json_and_text(tmp_path, capsys):
    b, a = tmp_path / "b.dcprof", tmp_path / "a.dcprof"
    save(before_tree(), b)
    save(after_tree(), a)
    assert main(["diff", str(b), str(a), "--metric", "gpu.time", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "deepcontext.diff/1" and doc["metric"] == "gpu.time"
    assert doc["speedup"] == pytest.approx(0.2 / 0.02)
    (ctx,) = doc["contexts"]
    assert ctx["kernels"]["elementwise"] == {"before": 600, "after": 0}
    assert doc["totals"]["gpu.launches"] == {"before": 600, "after": 100, "delta": -500}
    assert main(["diff", str(b), str(a), "--metric", "op.time"]) == 0
    out = capsys.readouterr().out
    assert "speedup 1.45x" in out and "aten::mul 600->0" in out


def test_cli_errors_are_one_line(tmp_path, capsys):
    b = tmp_path / "b.dcprof"
    save(before_tree(), b)
    assert main(["diff", str(b), str(b), "--metric", "nope"]) == 2
    assert "is in neither profile" in capsys.readouterr().err
    assert main(["diff", str(b), str(tmp_path / "missing.dcprof")]) == 2
    assert main(["diff", str(b), str(b), "--threshold", "2"]) == 2


def test_cli_points_to_the_metric_that_changed(tmp_path, capsys):
    # a copy fix: kernels unchanged, copy time 4x shorter
    from deepcontext.analysis.testing import memcpy

    def tree(copy_time):
        return build([([user(20), op("aten::_to_copy"), memcpy("HtoD", copy_time < 0.01)],
                       {"memcpy.time": copy_time, "memcpy.bytes": 1e9, "memcpy.count": 20}),
                      ([user(21), op("aten::conv2d"), kernel("conv")], {"gpu.time": 0.004,
                                                                        "gpu.launches": 20})])
    b, a = tmp_path / "b.dcprof", tmp_path / "a.dcprof"
    save(tree(0.02), b)
    save(tree(0.005), a)
    assert main(["diff", str(b), str(a)]) == 0
    out = capsys.readouterr().out
    assert "total memcpy.time: 20ms -> 5ms" in out
    assert "no context changed by 1% of the total or more; memcpy.time changed most: try " \
           "--metric memcpy.time" in out
