"""cpu-latency on literal trees: Python element loops and launch-bound GPU lines."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.cpu_latency import CpuLatencyRule
from deepcontext.analysis.testing import build, kernel, lib, op, user

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


def gpu_tree(host, runs=5000):
    line = [user(8, "step")]
    return build([REST, (line, {"cpu.time": host}),
                  (line + [op("aten::add")], {"op.count": runs, "op.time": 0.01}),
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


def test_set_up_lines_never_get_a_launch_bound_finding():
    # the line ran 9 times (building a model, a warm-up): its host time is first-use cost
    assert run(gpu_tree(0.5, runs=9)) == []
    # building a model: 0.46 s of host time for 74 us of GPU work, all inside constructors
    build_line = [user(8, "main"), lib("ResNet.__init__", "/sp/torchvision/models/resnet.py")]
    tree = build([REST, (build_line, {"cpu.time": 0.46}),
                  (build_line + [op("aten::normal_")], {"op.count": 5000, "op.time": 0.4}),
                  (build_line + [op("aten::normal_"), kernel("normal")],
                   {"gpu.time": 74e-6, "gpu.launches": 5000})])
    assert run(tree) == []


def test_compilation_inside_a_step_line_is_not_host_time():
    # the compiled model's step line: 17 s of Dynamo/Inductor work on its first call, then
    # 20 launch-bound-free steps
    step = [user(8, "main")]
    compile_frames = step + [lib("_compile", "/sp/torch/_dynamo/convert_frame.py")]
    tree = build([REST, (compile_frames, {"cpu.time": 17.4}),
                  (step + [op("aten::mm")], {"op.count": 2000, "op.time": 0.01}),
                  (step + [op("aten::mm"), kernel("gemm")], {"gpu.time": 0.33e-3 * 20,
                                                            "gpu.launches": 2000})])
    assert run(tree) == []
    # the same profile without the compile frames is launch-bound
    tree = build([REST, (step, {"cpu.time": 17.4}),
                  (step + [op("aten::mm")], {"op.count": 2000, "op.time": 0.01}),
                  (step + [op("aten::mm"), kernel("gemm")], {"gpu.time": 0.33e-3 * 20,
                                                            "gpu.launches": 2000})])
    assert [f.location.line for f in run(tree)] == [8]


def test_first_calls_recorded_by_the_capture_are_left_out():
    # op.first_time: each operator context's first call (cuBLAS handle, allocator growth)
    def tree(first):
        line = [user(8, "step")]
        return build([REST, (line + [op("aten::mm")], {"op.count": 100, "op.time": 0.3,
                                                       "op.first_time": first}),
                      (line + [op("aten::mm"), kernel("gemm")],
                       {"gpu.time": 0.05, "gpu.launches": 5000})])
    assert [f.evidence["host_time_s"] for f in run(tree(0.0))] == [0.3]
    assert run(tree(0.2)) == []  # 0.1 s of steady host time for 0.05 s of GPU work


def test_views_in_a_forward_pass_are_not_an_element_loop():
    # a model call: thousands of tiny view/transpose/slice ops issued inside library code
    fwd = [user(5, "main"), lib("Block.forward", "/sp/transformers/models/gpt2/modeling.py")]
    tree = build([REST] + [(fwd + [op(n)], {"op.count": 3000, "op.time": 3000 * 2e-6})
                           for n in ("aten::view", "aten::transpose", "aten::slice",
                                     "aten::select", "aten::unsqueeze")])
    assert run(tree) == []


def row_loop_tree(rows=256, steps=40):
    """loss(): one line before the loop, a loop body over ``rows`` rows of tiny ops."""
    calls = [user(20, "main"), user(5, "loss")]
    body = [user(20, "main"), user(7, "loss")]
    paths = [REST, (calls + [op("aten::zeros")], {"op.count": steps, "op.time": 1e-5 * steps})]
    for name in ("aten::select", "aten::mv", "aten::add", "aten::tanh", "aten::sum"):
        paths.append((body + [op(name)], {"op.count": rows * steps,
                                          "op.time": rows * steps * 8e-6}))
    return build(paths)


def test_a_loop_over_rows_is_told_to_vectorize_over_that_dimension():
    (f,) = run(row_loop_tree())
    assert f.location.line == 7 and f.location.function == "loss"
    assert f.evidence["iterations_per_call"] == 256 and f.evidence["ops_per_iteration"] == 5
    assert f.evidence["indexing"] == "select"
    assert "vectorize over that dimension" in f.suggestion
    assert abs(f.estimated_gain.seconds - 256 * 40 * 5 * 8e-6 * 0.9) < 1e-9
    # the kernel-fusion rule leaves the loop's chain (add, tanh, ...) to this advice
    from deepcontext.analysis.rules.kernel_fusion import KernelFusionRule
    assert analyze(row_loop_tree(), rules=[KernelFusionRule()]) == []


def test_a_few_iterations_or_heavy_rows_are_not_a_row_loop():
    assert run(row_loop_tree(rows=4)) == []


def test_one_time_cuda_setup_is_not_launch_overhead():
    # line 9 created the CUDA context (0.13 s of gpu.init) inside its first torch.ones
    def tree(init):
        return build([([user(30), op("aten::mm")], {"op.time": 0.5, "op.count": 100}),
                      ([user(30), op("aten::mm"), kernel("gemm")], {"gpu.time": 0.45, "gpu.launches": 100}),
                      ([user(9), op("aten::ones")], {"op.time": 0.131, "op.count": 200, "gpu.init": init}),
                      ([user(9), op("aten::ones"), kernel("fill")], {"gpu.time": 155e-6, "gpu.launches": 200})])
    assert [f.location.line for f in analyze(tree(0.0), rules=[CpuLatencyRule()])] == [9]
    assert analyze(tree(0.13), rules=[CpuLatencyRule()]) == []
