"""``--context python,op,native``: C/C++ frames spliced between Python lines, operators and leaves."""

import pytest

pytest.importorskip("torch")

from helpers import line_of, loaded, python_nodes, record, subtree_ids  # noqa: E402


def op_nodes(tree, name, under):
    return [n for n in subtree_ids(tree, under)
            if tree.nodes[n].frame.kind == "op" and tree.nodes[n].frame.name == name]


def kinds_between(tree, top, bottom):
    """Frame kinds strictly between node ``top`` and its descendant ``bottom``."""
    ids = tree.path_ids(bottom)
    return [tree.nodes[i].frame for i in ids[ids.index(top) + 1:-1]]


@pytest.fixture(scope="module")
def linear_native(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("native")
    proc, out = record(tmp, "linear_train.py", "3", options=("--context", "python,op,native"))
    assert proc.returncode == 0, proc.stderr
    return loaded(out)


def test_python_native_op_native_op(linear_native):
    tree = linear_native
    (fwd,) = python_nodes(tree, "linear_train.py", line_of("linear_train.py", "FORWARD"))
    (linear,) = op_nodes(tree, "aten::linear", fwd)
    assert tree.exclusive(linear, "op.count") == 3
    # the Python binding sits between the user's line and the operator ...
    above = kinds_between(tree, fwd, linear)
    assert above[-1].kind == "native" and "THPVariable_linear" in above[-1].name
    assert above[-1].file.endswith("libtorch_python.so")
    # ... and the operator's own C++ implementation between it and the nested operator
    (addmm,) = op_nodes(tree, "aten::addmm", linear)
    below = kinds_between(tree, linear, addmm)
    assert any(f.kind == "native" and f.name.startswith("at::native::linear(") for f in below)
    assert all(f.kind == "native" for f in below)
    assert tree.exclusive(addmm, "op.count") == 3


def test_native_frames_are_symbolized_with_library_and_offset(linear_native):
    natives = [n.frame for n in linear_native.nodes if n.frame.kind == "native"]
    assert natives
    assert all(f.name and f.file for f in natives)
    assert all(f.get("offset").startswith("0x") for f in natives)
    assert linear_native.metadata["complete"] is True


def test_cpu_samples_inside_operators_reach_native_leaves(tmp_path):
    proc, out = record(tmp_path, "conv_matmul.py",
                       options=("--context", "python,op,native", "--sample-interval", "0.002"))
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    (conv_line,) = python_nodes(tree, "conv_matmul.py", line_of("conv_matmul.py", "CONV"))
    (conv_op,) = op_nodes(tree, "aten::conv2d", conv_line)
    inside = [n for n in subtree_ids(tree, conv_op) if n != conv_op]
    sampled_native = sum(tree.exclusive(n, "cpu.time") for n in inside
                         if tree.nodes[n].frame.kind == "native")
    assert sampled_native > 0.5 * tree.inclusive(conv_op, "cpu.time") > 0


def test_default_context_has_no_native_frames(tmp_path):
    proc, out = record(tmp_path, "linear_train.py", "1")
    assert proc.returncode == 0, proc.stderr
    assert not [n for n in loaded(out).nodes if n.frame.kind == "native"]
