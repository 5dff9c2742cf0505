"""cpu-latency on literal trees: Python element loops and launch-bound GPU lines."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.cpu_latency import CpuLatencyRule
from deepcontext.analysis.testing import build, kernel, op, user

REST = ([user(30), op("aten::addmm")], {"op.time": 0.9, "op.count": 100})


def run(tree):
    return analyze(tree, rules=[CpuLatencyRule()])


def loop_tree(calls, per_call):
    line = [user(5, "fill")]
    return build([REST] + [(line + [op(n)], {"op.count": calls, "op.time": calls * per_call})
                           for n in ("aten::select", "aten::copy_", "aten::mul")])


def test_element_loop_fires_with_vectorize_advice():
    (f,) = run(loop_tree(1000, 5e-6))
    assert f.location.line == 5 and f.evidence["op_calls"] == 3000
    assert f.evidence["access_calls"] == 2000
    assert "vectorize" in f.suggestion
    assert abs(f.estimated_gain.seconds - 0.015 * 0.9) < 1e-9


def test_quiet_below_min_calls_or_when_calls_do_real_work():
    assert run(loop_tree(333, 5e-6)) == []       # 999 calls
    assert run(loop_tree(1000, 30e-6)) == []      # 30 us per call: work, not overhead


def test_pointwise_chains_are_left_to_kernel_fusion():
    line = [user(5)]
    tree = build([REST] + [(line + [op(n)], {"op.count": 2000, "op.time": 0.01})
                           for n in ("aten::mul", "aten::add")])
    assert run(tree) == []


def gpu_tree(host):
    line = [user(8, "step")]
    return build([REST, (line, {"cpu.time": host}),
                  (line + [op("aten::add"), kernel("elementwise")],
                   {"gpu.time": 0.05, "gpu.launches": 5000})])


def test_launch_bound_line_fires_on_gpu_profiles():
    (f,) = run(gpu_tree(0.5))
    assert f.location.line == 8
    assert f.evidence["launches"] == 5000 and f.evidence["mean_kernel_s"] == 1e-5
    assert "CUDA graphs" in f.suggestion
    assert abs(f.estimated_gain.seconds - 0.45) < 1e-9


def test_launch_bound_quiet_when_host_is_under_three_times_gpu():
    assert run(gpu_tree(0.14)) == []
