"""autograd-unused on literal trees: inference in grad mode in a program that never runs
backward (``autograd.nodes``: operators that recorded an autograd node)."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.autograd import UnusedAutogradRule
from deepcontext.analysis.testing import build, lib, marker, op, user

FORWARD = [user(14, "main"), lib("Module._call_impl"), lib("BertModel.forward",
                                                          "/sp/site-packages/transformers/bert.py")]


def inference(nodes=120000, runs=40, backward=False):
    paths = [(FORWARD + [op("aten::embedding")], {"op.count": runs, "op.time": 0.01}),
             (FORWARD + [op("aten::addmm")], {"op.count": 30 * runs, "op.time": 0.5,
                                              "autograd.nodes": nodes})]
    if backward:
        paths.append((FORWARD + [marker(), op("autograd::engine::evaluate_function: "
                                              "AddmmBackward0")], {"op.count": 10}))
    return build(paths)


def run(tree):
    return analyze(tree, rules=[UnusedAutogradRule()])


def test_inference_in_grad_mode_is_told_to_use_inference_mode():
    (f,) = run(inference())
    assert f.location.line == 14 and f.rule == "autograd-unused"
    assert f.evidence["autograd_nodes"] == 120000 and f.evidence["runs"] == 40
    assert "torch.inference_mode()" in f.suggestion
    assert abs(f.estimated_gain.seconds - 120000 * 2e-6) < 1e-9  # 0.24 s of 0.51 s


def test_quiet_when_a_backward_runs_or_no_node_was_recorded():
    assert run(inference(backward=True)) == []
    assert run(inference(nodes=0)) == []  # under no_grad / inference_mode
    assert run(inference(nodes=99)) == []


def test_a_set_up_line_is_not_the_inference_loop():
    assert run(inference(runs=3)) == []
