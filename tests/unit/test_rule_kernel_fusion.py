"""kernel-fusion on literal trees: fires on a hand-written activation, quiet just below."""

import pytest

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.kernel_fusion import KernelFusionRule
from deepcontext.analysis.testing import USER_FILE, build, kernel, lib, marker, op, user
from deepcontext.tree.frame import Frame

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


ACT = "/usr/lib/python3.11/site-packages/transformers/activations.py"


# The H200 image's venv is /opt/torch/.venv: a "/torch/" in the prefix is not torch's package
# (it once made every transformers frame torch plumbing, and GPT-2's chain one chain of step()).
@pytest.mark.parametrize("prefix", ["/usr/lib/python3.11/site-packages",
                                    "/opt/torch/.venv/lib/python3.12/site-packages"])
def test_a_library_chain_is_found_where_it_lives_and_reported_at_the_users_line(prefix):
    act = f"{prefix}/transformers/activations.py"
    frames = [user(12), lib("Module._call_impl", f"{prefix}/torch/nn/modules/module.py"),
              lib("NewGELUActivation.forward", act, 66)]
    tree = build([REST] + [(frames + [op(n)], {"op.count": c, "op.time": 0.05})
                           for n, c in (("aten::mul", 400), ("aten::pow", 100),
                                        ("aten::add", 200), ("aten::tanh", 100))])
    (f,) = run(tree)
    assert f.location.line == 12 and f.location.file == USER_FILE  # the line you can change
    assert (f.origin.file, f.origin.line, f.origin.function) == (
        act, 66, "NewGELUActivation.forward")  # where the chain lives
    assert f.path[-1] == "NewGELUActivation.forward (activations.py:66)"
    assert f.evidence["ops_per_call"] == 8.0
    assert f.evidence["library_function"] == ("transformers/activations.py:66 "
                                              "NewGELUActivation.forward")
    assert "activation_function='gelu_pytorch_tanh'" in f.suggestion  # the config lever
    assert "<module>" not in f.suggestion and "torch.compile(model)" in f.suggestion


def test_each_library_chain_under_one_line_is_its_own_chain():
    # a whole model under one user line: the GELU of the MLP and a hand-written norm are two
    # chains (one per function call), not one 12-op chain of everything under the line
    gelu = [user(12), lib("Module._call_impl"), lib("NewGELUActivation.forward", ACT, 66)]
    norm = [user(12), lib("Module._call_impl"),
            lib("RMSNorm.forward", "/sp/site-packages/mylib/norm.py", 9)]
    paths = [REST] + [(gelu + [op(n)], {"op.count": c, "op.time": 0.05})
                      for n, c in (("aten::mul", 400), ("aten::pow", 100), ("aten::add", 200),
                                   ("aten::tanh", 100))]
    paths += [(norm + [op(n)], {"op.count": c, "op.time": 0.05})
              for n, c in (("aten::pow", 100), ("aten::mean", 100), ("aten::add", 100),
                           ("aten::rsqrt", 100), ("aten::mul", 200))]
    got = sorted(run(build(paths)), key=lambda f: f.origin.function)
    assert [(f.origin.function, f.evidence["ops_per_call"]) for f in got] == [
        ("NewGELUActivation.forward", 8.0), ("RMSNorm.forward", 5.0)]
    assert "torch.nn.RMSNorm(shape)" in got[1].suggestion  # a module swap for a library norm


def test_module_frames_name_the_module_path():
    def layer(i):
        return [user(12), Frame.make("module", f"transformer.h.{i}.mlp.act"),
                lib("NewGELUActivation.forward", ACT, 66)]
    paths = [REST] + [(layer(i) + [op(n)], {"op.count": c, "op.time": 0.02})
                      for i in range(3) for n, c in (("aten::mul", 40), ("aten::pow", 10),
                                                     ("aten::add", 20), ("aten::tanh", 10))]
    (f,) = run(build(paths))
    assert f.evidence["module"] == "transformer.h.*.mlp.act"
    assert f.evidence["op_calls"] == 240 and "transformer.h.*.mlp.act" in f.message


def test_fix_texts_can_be_typed():
    # a nested function and module-level code: never `<module> = torch.compile(<module>)`
    def chain(frames):
        return build([REST] + [(frames + [op(n)], {"op.count": 100, "op.time": 0.05})
                               for n in ("aten::mul", "aten::sub", "aten::exp", "aten::abs")])
    (nested,) = run(chain([user(12), user(4, "main.<locals>.act")]))
    assert "decorate the nested function `def act` with @torch.compile" in nested.suggestion
    assert "<locals>" not in nested.suggestion and "act() (nested in main)" in nested.title
    (top,) = run(chain([user(12, "<module>")]))
    assert "<module>" not in top.suggestion + top.title
    assert "move the expression into a function" in top.suggestion


def test_hand_written_silu_with_exp_and_div_is_not_a_softmax():
    def chain(names):
        return build([REST] + [([user(10), user(4, "act"), op(n)],
                                {"op.count": 100, "op.time": 0.05}) for n in names])
    (silu,) = run(chain(("aten::neg", "aten::exp", "aten::add", "aten::div")))
    assert "silu" in silu.suggestion and "softmax" not in silu.suggestion
    (softmax,) = run(chain(("aten::sub", "aten::exp", "aten::sum", "aten::div", "aten::amax",
                            "aten::mul")))
    assert "torch.softmax" in softmax.suggestion


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


def test_rms_norm_on_the_cpu_saves_only_its_forward():
    # torch's CPU rms_norm backward is the decomposed chain: the swap speeds up the forward only
    norm = [user(12), lib("Module._call_impl"),
            lib("LlamaRMSNorm.forward", "/sp/site-packages/transformers/llama.py", 66)]
    paths = [REST] + [(norm + [op(n)], {"op.count": 100, "op.time": 0.02})
                      for n in ("aten::pow", "aten::mean", "aten::add", "aten::rsqrt",
                                "aten::mul")]
    paths.append((norm + [marker(), op("autograd::engine::evaluate_function: PowBackward0")],
                  {"op.count": 100, "op.time": 0.2}))
    (f,) = run(build(paths))
    assert abs(f.estimated_gain.seconds - 0.08 * (1 - 1 / 4)) < 1e-9  # 4 pointwise, no backward
    assert "torch.nn.RMSNorm(shape)" in f.suggestion and "forward they took" in f.message


def test_a_dispatch_bound_chain_without_a_fused_api_is_a_note_on_the_cpu():
    # a vectorized hinge loss on 256x10 scores: 4 elementwise ops of ~8 us each per call;
    # torch.compile's own call overhead is as large as what fusing would save
    line = [user(10), user(18, "margin_loss")]
    tree = build([([user(30), op("aten::addmm")], {"op.time": 0.01, "op.count": 100})]
                 + [(line + [op(n)], {"op.count": 100, "op.time": 100 * 8e-6})
                    for n in ("aten::add", "aten::clamp", "aten::rsub", "aten::sub")])
    (f,) = run(tree)
    assert f.severity == "note" and f.estimated_gain.fraction > 0.05


def test_an_optimizers_per_parameter_update_is_not_a_chain_of_the_step_line():
    # torch.optim's single-tensor AdamW below `opt.step()`: torch's frames fold, so its updates
    # reach the step's line, 4 elementwise ops per step; optimizer-per-parameter owns them
    from deepcontext.analysis.testing import TORCH_DIR

    step = [user(11), lib("Optimizer.step", f"{TORCH_DIR}/optim/optimizer.py"),
            lib("_single_tensor_adam", f"{TORCH_DIR}/optim/adam.py", 400)]
    names = ("aten::sqrt", "aten::div", "aten::add", "aten::mul")
    paths = [REST] + [(step + [op(name)], {"op.count": 300, "op.time": 0.03}) for name in names]
    assert run(build(paths)) == []
    # the same operators issued by the user's own function still are one
    own = [REST] + [([user(11), user(4, "update"), op(name)], {"op.count": 300, "op.time": 0.03})
                    for name in names]
    (f,) = run(build(own))
    assert f.location.line == 4


GEN = "/usr/lib/python3.11/site-packages/transformers/generation/utils.py"


def beam_tree(seconds, module_call):
    # generate()'s beam bookkeeping (transformers 5.24, _update_finished_beams): a chain in the
    # library outside any module's forward, unless `module_call` puts it under one
    frames = [user(10), lib("GenerationMixin._beam_search", GEN, 3816)]
    if module_call:
        frames.append(lib("Module._call_impl"))
    frames.append(lib("GenerationMixin._update_finished_beams", GEN, 3557))
    return build([REST] + [(frames + [op(n)], {"op.count": 72, "op.time": seconds / 4})
                           for n in ("aten::bitwise_not", "aten::mul", "aten::add_",
                                     "aten::div")])


def test_a_library_chain_outside_any_modules_forward_is_not_told_to_compile_the_model():
    assert run(beam_tree(0.02, module_call=False)) == []  # a note with no lever: quiet
    (f,) = run(beam_tree(0.2, module_call=False))  # large enough to warn: said as it is
    assert f.severity == "warning"
    assert f.suggestion.startswith(
        "the chain is the library code transformers/generation/utils.py:3557 "
        "(GenerationMixin._update_finished_beams), outside any nn.Module's forward, so "
        "compiling the model does not reach it and no argument at train.py:10 removes it")
    # the same chain inside a module's call: compiling the model covers it
    (g,) = run(beam_tree(0.02, module_call=True))
    assert g.severity == "note" and g.suggestion.startswith(
        "compile the model that train.py:10 calls: `compiled = torch.compile(model)`")
