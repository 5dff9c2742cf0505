"""layout-copy on literal trees: real contiguous copies in the step, not no-op contiguous."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.layout import LayoutChurnRule
from deepcontext.analysis.testing import build, lib, op, user

REST = ([user(30), op("aten::bmm")], {"op.time": 0.9, "op.count": 600})


def tree_with(copies, copy_child=True, conv=False):
    base = [user(16), user(6, "scores")]
    contig = base + [op("aten::contiguous")]
    paths = [REST, ([*base, op("aten::transpose")], {"op.count": copies, "op.time": 1e-3}),
             (contig, {"op.count": copies, "op.time": 1e-3})]
    if copy_child:
        paths.append((contig + [op("aten::clone"), op("aten::copy_")],
                      {"op.count": copies, "op.time": 0.05}))
    if conv:
        paths.append(([user(16), user(7, "scores"), op("aten::conv2d")], {"op.count": 1}))
    return build(paths)


def run(tree):
    return analyze(tree, rules=[LayoutChurnRule()])


def test_transpose_contiguous_in_the_step_fires_at_the_line():
    (f,) = run(tree_with(600))
    assert f.location.line == 6 and f.location.function == "scores"
    assert f.evidence["copies"] == 600 and f.evidence["views"] == "transpose"
    assert "strided view" in f.suggestion
    assert abs(f.estimated_gain.seconds - 0.051) < 1e-9


def test_contiguous_that_copies_nothing_is_quiet():
    assert run(tree_with(600, copy_child=False)) == []


def test_quiet_just_below_min_copies():
    assert run(tree_with(99)) == []


def test_convolution_nearby_suggests_channels_last():
    (f,) = run(tree_with(600, conv=True))
    assert "channels_last" in f.suggestion


def test_library_internal_copy_points_at_the_calling_line():
    frames = [user(22), lib("forward", "/x/site-packages/timm/layers/attn.py"), op("aten::reshape")]
    tree = build([REST, (frames + [op("aten::clone"), op("aten::copy_")],
                         {"op.count": 300, "op.time": 0.05})])
    (f,) = run(tree)
    assert f.location.line == 22
    assert f.severity == "note" and f.evidence["inside"] == "forward"  # the library's copy
    assert "inside forward" in f.suggestion


def test_an_intentional_clone_is_not_a_layout_copy():
    # x.clone() of a contiguous tensor, every step: a copy the program wants, no view before it
    line = [user(16), user(9, "snapshot")]
    clone = line + [op("aten::clone")]
    tree = build([REST, (clone, {"op.count": 600, "op.time": 1e-3}),
                  (clone + [op("aten::copy_")], {"op.count": 600, "op.time": 0.3})])
    assert run(tree) == []
    # x.t().clone(): the clone exists to change the layout
    tree = build([REST, (line + [op("aten::t")], {"op.count": 600, "op.time": 1e-3}),
                  (clone, {"op.count": 600, "op.time": 1e-3}),
                  (clone + [op("aten::copy_")], {"op.count": 600, "op.time": 0.3})])
    (f,) = run(tree)
    assert f.location.line == 9 and f.evidence["views"] == "t"
