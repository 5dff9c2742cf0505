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


def test_one_time_cuda_setup_is_not_launch_overhead():
    # line 9 created the CUDA context (0.13 s of gpu.init) inside its first torch.ones
    def tree(init):
        return build([([user(30), op("aten::mm")], {"op.time": 0.5, "op.count": 100}),
                      ([user(30), op("aten::mm"), kernel("gemm")], {"gpu.time": 0.45, "gpu.launches": 100}),
                      ([user(9), op("aten::ones")], {"op.time": 0.131, "op.count": 200, "gpu.init": init}),
                      ([user(9), op("aten::ones"), kernel("fill")], {"gpu.time": 155e-6, "gpu.launches": 200})])
    assert [f.location.line for f in analyze(tree(0.0), rules=[CpuLatencyRule()])] == [9]
    assert analyze(tree(0.13), rules=[CpuLatencyRule()]) == []
