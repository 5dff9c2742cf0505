"""optimizer-per-parameter on literal trees: manual loops and torch.optim's single-tensor path."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.optimizer import OptimizerLoopRule
from deepcontext.analysis.testing import TORCH_DIR, build, lib, marker, op, user

REST = ([user(30), op("aten::addmm")], {"op.time": 0.9, "op.count": 100})
GRADS = ([user(31), lib("backward"), op("torch::autograd::AccumulateGrad")], {"op.count": 240})


def manual(updates=240, with_backward=True):
    paths = [REST, ([user(20), user(8, "sgd_step"), op("aten::add_")],
                    {"op.count": updates, "op.time": 0.15})]
    return build(paths + ([GRADS] if with_backward else []))


def run(tree):
    return analyze(tree, rules=[OptimizerLoopRule()])


def test_manual_per_parameter_loop_fires_at_the_update_line():
    (f,) = run(manual())
    assert f.location.line == 8 and f.location.function == "sgd_step"
    assert f.evidence["updates_per_gradient"] == 1.0
    assert "fused=True" in f.suggestion and "does not help on CPU" in f.suggestion
    assert f.estimated_gain.seconds == 0.075 and f.severity == "warning"  # 7% of the run


def test_no_backward_pass_means_no_parameter_updates():
    assert run(manual(with_backward=False)) == []


def test_quiet_just_below_min_update_calls():
    tree = build([REST, ([user(20), user(8, "sgd_step"), op("aten::add_")],
                         {"op.count": 99, "op.time": 0.05}),
                  ([user(31), op("torch::autograd::AccumulateGrad")], {"op.count": 99})])
    assert run(tree) == []


def test_far_more_updates_than_gradients_is_some_other_loop():
    assert run(manual(updates=240 * 9)) == []


def test_single_tensor_adam_points_at_the_step_call():
    step = [user(40), lib("Optimizer.step", f"{TORCH_DIR}/optim/optimizer.py"),
            lib("_single_tensor_adam", f"{TORCH_DIR}/optim/adam.py", 400)]
    tree = build([REST, GRADS,
                  (step + [op("aten::addcmul_")], {"op.count": 240, "op.time": 0.1}),
                  (step + [op("aten::lerp_")], {"op.count": 240, "op.time": 0.1})])
    (f,) = run(tree)
    assert f.location.line == 40
    assert f.evidence["algorithm"] == "adam"
    assert "torch.optim.Adam(params, lr=..., fused=True)" in f.suggestion


def test_single_tensor_rmsprop_on_cpu_has_no_faster_path_to_suggest():
    step = [user(40), lib("_single_tensor_rmsprop", f"{TORCH_DIR}/optim/rmsprop.py", 300)]
    tree = build([REST, GRADS, (step + [op("aten::addcmul_")], {"op.count": 240, "op.time": 0.2})])
    assert run(tree) == []


def test_gpu_profiles_suggest_fused_or_foreach():
    from deepcontext.analysis.testing import kernel
    tree = manual()
    leaf = tree.add_path([user(30), op("aten::addmm"), kernel("gemm")])
    tree.add_metric(leaf, "gpu.time", 0.01)
    (f,) = run(tree)
    assert "foreach=True" in f.suggestion and "_foreach_add_" in f.suggestion


def test_backward_in_place_ops_are_not_an_optimizer_loop():
    tree = build([REST, GRADS, ([user(20), marker(), op("aten::add_")],
                                {"op.count": 240, "op.time": 0.05})])
    assert run(tree) == []


def step_op_tree(children):
    step = [user(40), lib("Optimizer.profile_hook_step.<locals>.wrapper",
                          f"{TORCH_DIR}/optim/optimizer.py", 514), op("Optimizer.step#Adam.step")]
    return build([REST, GRADS, (step, {"op.time": 0.1, "op.count": 50})]
                 + [(step + [op(c)], {"op.count": 400, "op.time": 0.05}) for c in children])


def test_single_tensor_path_seen_through_the_step_record_function():
    # in real profiles Python frames under an operator are not captured: the step's
    # record_function op holds the per-parameter operators directly
    (f,) = run(step_op_tree(["aten::add_", "aten::mul_", "aten::addcmul_", "aten::lerp_"]))
    assert f.location.line == 40 and f.evidence["algorithm"] == "adam"
    assert f.evidence["step_time_s"] == 0.3 and f.estimated_gain.seconds == 0.15


def test_foreach_and_fused_steps_are_quiet():
    assert run(step_op_tree(["aten::_foreach_add_", "aten::_foreach_mul_"])) == []
    assert run(step_op_tree(["aten::_fused_adam_"])) == []


def test_zero_grad_without_set_to_none_is_not_an_optimizer_loop():
    # model.zero_grad(set_to_none=False): one zero_ per gradient, from nn.Module's own loop
    zero = [user(22), lib("Module.zero_grad"), op("aten::zero_")]
    assert run(build([REST, GRADS, (zero, {"op.count": 240, "op.time": 0.05})])) == []
    # the same line count of add_ is the per-parameter update it looks like
    add = [user(22), user(5, "sgd_step"), op("aten::add_")]
    assert [f.location.line for f in run(build([REST, GRADS, (add, {"op.count": 240,
                                                                    "op.time": 0.05})]))] == [5]
