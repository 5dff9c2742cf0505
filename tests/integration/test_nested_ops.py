"""Which operators the op layer records: those Python calls, by default; with the nested layer
also the ones they call. Exact counts, both ways, on real torch."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from helpers import children_named, line_of, loaded, python_nodes, subtree_ids  # noqa: E402

PROG = "nested_ops.py"
PROGRAMS = Path(__file__).parent / "programs"
STEPS = 3


def profile(tmp_path: Path, context: str):
    out = tmp_path / f"{context.replace(',', '_')}.dcprof"
    proc = subprocess.run([sys.executable, str(PROGRAMS / PROG), str(out), context],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr[-3000:]
    return loaded(out)


@pytest.fixture(scope="module")
def default(tmp_path_factory):
    return profile(tmp_path_factory.mktemp("default"), "python,op")


@pytest.fixture(scope="module")
def nested(tmp_path_factory):
    return profile(tmp_path_factory.mktemp("nested"), "python,op,nested")


def ops_under(tree, nid):
    return {tree.nodes[c].frame.name: tree.exclusive(c, "op.count")
            for c in tree.nodes[nid].children if tree.nodes[c].frame.kind == "op"}


def line(tree, marker):
    (nid,) = python_nodes(tree, PROG, line_of(PROG, marker))
    return nid


def test_the_line_gets_the_operator_it_called_and_nothing_below(default):
    tree = default
    assert ops_under(tree, line(tree, "LINEAR")) == {"aten::linear": STEPS}
    (linear,) = children_named(tree, line(tree, "LINEAR"), "op", "aten::linear")
    assert ops_under(tree, linear) == {}


def test_the_nested_layer_records_what_the_operator_calls(nested):
    tree = nested
    (linear,) = children_named(tree, line(tree, "LINEAR"), "op", "aten::linear")
    assert tree.exclusive(linear, "op.count") == STEPS
    calls = ops_under(tree, linear)
    assert calls["aten::t"] == STEPS and calls["aten::matmul"] == STEPS, calls


@pytest.mark.parametrize("which", ["default", "nested"])
def test_both_backward_nodes_of_a_hidden_call_find_the_forward_line(which, request):
    # aten::linear's calls create two autograd nodes (t, and mm); with them hidden the linear
    # reports both sequence numbers, and each backward node lands under the forward line
    tree = request.getfixturevalue(which)
    (marker,) = children_named(tree, line(tree, "LINEAR"), "marker", "backward")
    # (the engine's wrapper around each node is recorded only with every operator: nested)
    prefix = "autograd::engine::evaluate_function: " if which == "nested" else ""
    nodes = ops_under(tree, marker)
    assert nodes == {prefix + "MmBackward0": STEPS, prefix + "TBackward0": STEPS}, nodes
    (bwd,) = python_nodes(tree, PROG, line_of(PROG, "BACKWARD"))
    assert prefix + "MmBackward0" not in ops_under(tree, bwd)


def test_layout_ops_keep_their_copy(default):
    tree = default
    (contiguous,) = children_named(tree, line(tree, "CONTIGUOUS"), "op", "aten::contiguous")
    (clone,) = children_named(tree, contiguous, "op", "aten::clone")
    assert ops_under(tree, clone) == {"aten::empty_like": STEPS, "aten::copy_": STEPS}


def test_python_that_runs_inside_an_operator_shows_what_it_calls(default):
    tree = default
    (add,) = children_named(tree, line(tree, "UNDER_MODE"), "op", "aten::add")
    (mode,) = children_named(tree, add, "op", "PythonDispatchMode")
    (redispatch,) = python_nodes(tree, PROG, line_of(PROG, "REDISPATCH"))
    assert mode in tree.path_ids(redispatch)
    adds = [n for n in subtree_ids(tree, redispatch) if tree.nodes[n].frame.name == "aten::add"]
    assert len(adds) == 1 and tree.exclusive(adds[0], "op.count") == STEPS


def test_torch_profiler_beside_a_session_sees_every_call_and_the_profile_keeps_its_shape(tmp_path):
    prog = "beside_torch_profiler.py"
    out = tmp_path / "beside.dcprof"
    proc = subprocess.run([sys.executable, str(PROGRAMS / prog), str(out)],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "session: query rebound True, state setter rebound True, wrapper query rebound True",
        "torch.profiler saw: MmBackward0 aten::linear aten::matmul aten::mm aten::t "
        "autograd::engine::evaluate_function: MmBackward0",
        "after the session: (0, 0, 0)",  # torch's own bindings are back: unprofiled code pays none
    ]
    tree = loaded(out)
    for marker in ("ALONE", "BESIDE"):  # the nested calls stay hidden from our profile
        (at,) = python_nodes(tree, prog, line_of(prog, marker))
        assert ops_under(tree, at) == {"aten::linear": 1, "aten::sum": 1}, marker
        (linear,) = children_named(tree, at, "op", "aten::linear")
        assert ops_under(tree, linear) == {}, marker
    # the engine's wrapper is recorded only where torch.profiler's callbacks start it anyway
    for marker, wrappers in (("ALONE", 0), ("BESIDE", 1)):
        (at,) = python_nodes(tree, prog, line_of(prog, marker))
        (backward,) = children_named(tree, at, "marker", "backward")
        assert ops_under(tree, backward).get(
            "autograd::engine::evaluate_function: MmBackward0", 0) == wrappers, marker
