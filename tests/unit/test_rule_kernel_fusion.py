"""kernel-fusion on literal trees: fires on a hand-written activation, quiet just below."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.kernel_fusion import KernelFusionRule
from deepcontext.analysis.testing import USER_FILE, build, kernel, lib, marker, op, user

REST = ([user(30), op("aten::addmm")], {"op.time": 0.9, "op.count": 100})


def gelu_tree(muls=600, adds=200, tanhs=100, gpu=False):
    paths = [REST]
    for name, n in (("aten::mul", muls), ("aten::add", adds), ("aten::tanh", tanhs)):
        frames = [user(10), user(4, "gelu"), op(name)]
        paths.append((frames, {"op.count": n, "op.time": 0.1 * n / 900}))
        if gpu:
            paths.append((frames + [kernel("vectorized_elementwise_kernel")],
                          {"gpu.time": 1e-5 * n, "gpu.launches": n}))
    return build(paths)


def run(tree):
    return analyze(tree, rules=[KernelFusionRule()])


def test_fires_on_handwritten_gelu_at_the_users_line():
    (f,) = run(gelu_tree())
    assert f.rule == "kernel-fusion" and f.category == "kernel_fusion"
    assert f.location.file == USER_FILE and f.location.line == 4 and f.location.function == "gelu"
    assert f.evidence["ops_per_call"] == 9.0 and f.evidence["distinct_ops"] == 3
    assert "gelu(x, approximate='tanh')" in f.suggestion
    assert abs(f.estimated_gain.seconds - 0.1 * 8 / 9) < 1e-9
    assert f.severity == "warning"  # 8.9% of a 1 s run


def test_quiet_just_below_four_ops_per_call():
    # 2 mul + 1 add per call = 3 elementwise ops: an ordinary statement
    assert run(gelu_tree(muls=200, adds=100, tanhs=0)) == []


def test_one_op_repeated_is_not_a_fusion_candidate():
    assert run(build([REST, ([user(10), op("aten::mul")], {"op.count": 800, "op.time": 0.1}),
                      ([user(10), op("aten::sum")], {"op.count": 100, "op.time": 0.01})])) == []


def test_points_at_the_user_line_not_the_library_function():
    frames = [user(12), lib("gelu_impl", "/usr/lib/python3.11/site-packages/transformers/act.py")]
    tree = build([REST] + [(frames + [op(n)], {"op.count": c, "op.time": 0.05})
                           for n, c in (("aten::mul", 300), ("aten::pow", 100), ("aten::add", 200))])
    (f,) = run(tree)
    assert f.location.line == 12 and f.location.file == USER_FILE
    assert f.path == ["main (train.py:12)"]  # the finding is about the user's line node


def test_gpu_gain_uses_kernel_time_and_reports_launches():
    (f,) = run(gelu_tree(gpu=True))
    assert f.evidence["gpu_launches"] == 900
    assert abs(f.estimated_gain.seconds - 900e-5 * 8 / 9) < 1e-9
    assert "kernel launch" in f.message


def test_lines_of_one_function_are_one_region():
    tree = build([REST,
                  ([user(10), user(4, "norm"), op("aten::sub")], {"op.count": 100, "op.time": .03}),
                  ([user(10), user(4, "norm"), op("aten::div")], {"op.count": 100, "op.time": .03}),
                  ([user(10), user(5, "norm"), op("aten::mul")], {"op.count": 100, "op.time": .03}),
                  ([user(10), user(5, "norm"), op("aten::add")], {"op.count": 100, "op.time": .03})])
    (f,) = run(tree)
    assert f.evidence["ops_per_call"] == 4.0
    assert "lines 4-5" in f.message


def test_backward_ops_count_in_the_gain_not_in_ops_per_call():
    tree = gelu_tree()
    bw = [user(10), user(4, "gelu"), marker(), op("autograd::engine::evaluate_function: MulBackward0")]
    leaf = tree.add_path(bw)
    tree.add_metric(leaf, "op.time", 0.09)
    tree.add_metric(leaf, "op.count", 600)
    (f,) = run(tree)
    assert f.evidence["ops_per_call"] == 9.0
    assert abs(f.estimated_gain.seconds - 0.19 * 8 / 9) < 1e-9


def test_ops_outside_user_code_do_not_hide_a_region():
    tree = gelu_tree()
    orphan = tree.add_path([lib("worker_loop"), op("aten::mul")])  # no user frame above
    tree.add_metric(orphan, "op.count", 10)
    last = tree.add_path([user(10), user(5, "gelu")])  # a sibling line of gelu, created last
    tree.add_metric(last, "cpu.time", 0.001)
    (f,) = run(tree)
    assert f.location.line == 4


def test_a_loop_line_is_not_a_link_of_the_chain():
    # step(): line 4 runs once per call (mul, add), line 5 once (square), line 6 is a loop over
    # 400 parameters (add_): 4 "ops per call" only if the loop is wrongly folded into the chain
    calls = 100
    tree = build([REST,
                  ([user(10), user(4, "step"), op("aten::mul")], {"op.count": calls, "op.time": .01}),
                  ([user(10), user(4, "step"), op("aten::add")], {"op.count": calls, "op.time": .01}),
                  ([user(10), user(5, "step"), op("aten::square")], {"op.count": calls, "op.time": .01}),
                  ([user(10), user(6, "step"), op("aten::add_")],
                   {"op.count": 400 * calls, "op.time": 0.3})])
    assert run(tree) == []
    # the same lines, all run once per call: a real 4-op chain
    tree = build([REST,
                  ([user(10), user(4, "step"), op("aten::mul")], {"op.count": calls, "op.time": .01}),
                  ([user(10), user(4, "step"), op("aten::add")], {"op.count": calls, "op.time": .01}),
                  ([user(10), user(5, "step"), op("aten::square")], {"op.count": calls, "op.time": .01}),
                  ([user(10), user(6, "step"), op("aten::add_")], {"op.count": calls, "op.time": .2})])
    (f,) = run(tree)
    assert f.evidence["ops_per_call"] == 4.0 and "lines 4-6" in f.message
