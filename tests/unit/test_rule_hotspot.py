"""hotspot on literal trees: the user's lines owning the most time, imports excluded."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.hotspot import HotspotRule
from deepcontext.analysis.testing import build, lib, op, user
from deepcontext.tree.frame import Frame

IMPORT = Frame.make("python", "_find_and_load", "<frozen importlib._bootstrap>", 1176)


def run(tree):
    return analyze(tree, rules=[HotspotRule()])


def test_reports_top_lines_as_notes_in_order_with_the_dominant_op():
    tree = build([
        ([user(10), lib("Linear.forward"), op("aten::addmm")], {"cpu.time": 0.70}),
        ([user(11), op("aten::mul")], {"cpu.time": 0.25}),
        ([user(12), op("aten::add")], {"cpu.time": 0.05}),
        ([user(1, "<module>"), IMPORT], {"cpu.time": 5.0}),
    ])
    first, second = run(tree)
    assert (first.location.line, second.location.line) == (10, 11)
    assert first.severity == second.severity == "note"
    assert first.evidence["share"] == 0.7
    assert "Most of it is in aten::addmm: 100.0% of the line" in first.message


def test_a_line_just_below_ten_percent_is_not_a_hotspot():
    tree = build([([user(10), op("aten::addmm")], {"cpu.time": 0.91}),
                  ([user(11), op("aten::mul")], {"cpu.time": 0.09})])
    (only,) = run(tree)
    assert only.location.line == 10


def test_gpu_time_ranks_when_present():
    tree = build([([user(10), op("aten::mm"), Frame.make("kernel", "gemm")], {"gpu.time": 0.9}),
                  ([user(11), op("aten::add")], {"cpu.time": 5.0})])
    (f,) = run(tree)
    assert f.location.line == 10 and "gpu.time" in f.title


def test_same_line_reached_two_ways_is_one_finding():
    tree = build([([user(20), user(10, "step")], {"cpu.time": 0.4}),
                  ([user(21), user(10, "step")], {"cpu.time": 0.4}),
                  ([user(22)], {"cpu.time": 0.2})])
    f = run(tree)[0]
    assert f.location.line == 10 and f.evidence["cpu.time"] == 0.8


def test_one_time_first_calls_and_worker_threads_are_not_the_steady_state():
    from deepcontext.analysis.context import AnalysisContext

    # a compiled region whose first call compiled for 20 s, run 30 times; the optimizer's line
    # with an intra-op worker's CPU time beside its operator
    region = [user(9), op("Torch-Compiled Region: 0/0")]
    worker = Frame.make("thread", "worker")
    tree = build([(region, {"op.time": 20.3, "op.first_time": 20.0, "op.count": 30}),
                  ([user(11), op("aten::addmm")], {"op.time": 0.5, "op.count": 30,
                                                   "cpu.time": 0.6}),
                  ([user(11), op("aten::addmm"), worker], {"cpu.time": 4.0})])
    ctx = AnalysisContext(tree)
    assert ctx.profiled_metric == "op.time" and abs(ctx.profiled_time - 0.8) < 1e-9
    first, second = run(tree)
    assert first.location.line == 11 and abs(first.evidence["share"] - 0.5 / 0.8) < 1e-9
    assert second.location.line == 9


def test_a_line_spread_over_many_operators_names_the_largest_part():
    # (a compiled region's line: its time in a dozen generated kernels)
    tree = build([([user(9), op(f"cpp_fused_{k}")], {"cpu.time": 0.1}) for k in range(10)])
    (f,) = run(tree)
    assert "The largest part is in cpp_fused_0: 10.0% of the line" in f.message


def test_an_operator_above_the_line_is_not_what_the_line_spends_in():
    # The DataLoader's record_function scope encloses the user's __getitem__: its Python line
    # is pure Python, whatever the scope around it is called.
    scope = op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
    tree = build([
        ([user(42), scope, user(24, "Reviews.__getitem__")], {"cpu.time": 0.6}),
        ([user(42), op("aten::addmm")], {"cpu.time": 0.4}),
    ])
    (inner, outer) = run(tree)
    assert (inner.location.line, outer.location.line) == (24, 42)
    assert "top_frame_cpu.time" not in inner.evidence
    assert inner.message.endswith("counting the library code, operators and kernels it calls.")
    assert "Most of it is in aten::addmm: 100.0% of the line" in outer.message


def test_a_line_seen_in_fewer_than_three_cpu_samples_is_noise():
    paths = [([user(10), op("aten::addmm")], {"cpu.time": 0.04}),
             ([user(11), op("aten::mul")], {"cpu.time": 0.03}),
             ([user(12), op("aten::add")], {"cpu.time": 0.02}),
             ([user(13), op("aten::sub")], {"cpu.time": 0.01})]
    found = run(build(paths, {"sample_interval": 0.01}))
    assert [f.location.line for f in found] == [10, 11]  # 4 and 3 samples; 2 and 1 are not
    assert [f.location.line for f in run(build(paths))] == [10, 11, 12]  # (no interval: by share)
