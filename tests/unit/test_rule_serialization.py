"""serialized-op on literal trees: sort inside scatter accumulation; sort-based unique."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.serialization import SerializationRule
from deepcontext.analysis.testing import build, kernel, op, user

REST = ([user(30), op("aten::addmm")], {"op.time": 0.9, "op.count": 100})


def run(*paths):
    return analyze(build([REST, *paths]), rules=[SerializationRule()])


def test_deterministic_index_put_sorting_fires():
    base = [user(9), op("aten::index_put_"), op("aten::_index_put_impl_")]
    (f,) = run((base, {"op.count": 100, "op.time": 0.01}),
               (base + [op("aten::sort")], {"op.count": 100, "op.time": 0.05}))
    assert f.location.line == 9 and f.evidence["sort_time_s"] == 0.05
    assert "use_deterministic_algorithms" in f.suggestion


def test_sort_kernel_under_scatter_counts_on_gpu():
    base = [user(9), op("aten::index_add_")]
    (f,) = run((base + [kernel("cub::DeviceRadixSortOnesweepKernel")], {"gpu.time": 0.05}))
    assert f.evidence["sort_time_s"] == 0.05


def test_scatter_without_sort_is_quiet():
    assert run(([user(9), op("aten::index_put_")], {"op.count": 100, "op.time": 0.05})) == []


def test_unique_in_hot_code_is_a_note_and_quiet_below_min_calls():
    (f,) = run(([user(11), op("aten::unique")], {"op.count": 10, "op.time": 0.05}))
    assert f.severity == "note" and "bincount" in f.suggestion
    assert run(([user(11), op("aten::unique")], {"op.count": 9, "op.time": 0.05})) == []
