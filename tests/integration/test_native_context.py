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
    proc, out = record(tmp, "linear_train.py", "3",
                       options=("--context", "python,op,nested,native"))
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
    assert natives and all(f.name for f in natives)
    # call sites carry their library and offset; sampled leaves stand for whole functions
    sites = [f for f in natives if f.get("offset")]
    assert len(sites) > len(natives) / 2
    assert all(f.file and f.get("offset").startswith("0x") for f in sites)
    assert linear_native.metadata["complete"] is True


def test_cpu_samples_inside_operators_reach_native_leaves(tmp_path):
    proc, out = record(tmp_path, "conv_matmul.py",
                       options=("--context", "python,op,native", "--sample-interval", "0.002"))
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    for marker, op in (("CONV", "aten::conv2d"), ("MATMUL", "aten::matmul")):
        (line,) = python_nodes(tree, "conv_matmul.py", line_of("conv_matmul.py", marker))
        (top_op,) = op_nodes(tree, op, line)
        total = tree.inclusive(top_op, "cpu.time")
        # every sample inside the operator reaches a native leaf below the innermost operator
        # (through a "<native unwind incomplete>" marker where a BLAS/JIT kernel has no unwind
        # tables), none stops at an operator node
        leaves = [n for n in subtree_ids(tree, top_op) if tree.exclusive(n, "cpu.time") > 0]
        assert total > 0 and leaves
        assert all(tree.nodes[n].frame.kind == "native" for n in leaves), \
            [tree.nodes[n].frame for n in leaves]
        # sampled leaves are keyed by function, not by instruction (the tree stays small however
        # long the run): no sampled leaf carries an offset, none repeats a function under a parent
        assert not [tree.nodes[n].frame for n in leaves if tree.nodes[n].frame.get("offset")]
        keys = [(tree.nodes[n].parent, tree.nodes[n].frame.name) for n in leaves]
        assert len(keys) == len(set(keys))


def test_default_context_has_no_native_frames(tmp_path):
    proc, out = record(tmp_path, "linear_train.py", "1")
    assert proc.returncode == 0, proc.stderr
    assert not [n for n in loaded(out).nodes if n.frame.kind == "native"]


@pytest.mark.parametrize("context", ["python,op", "python,op,native"])
def test_repeated_native_contexts_keep_their_lines_apart(tmp_path, context):
    # Lines A and B run torch.add through identical native stacks; only their Python frames
    # differ, so a placement memoized for one line must never serve the other.
    proc, out = record(tmp_path, "native_memo.py", options=("--context", context))
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    for marker, op, count in (("A", "aten::add", 300), ("B", "aten::add", 100),
                              ("C", "aten::mul", 300)):
        (line,) = python_nodes(tree, "native_memo.py", line_of("native_memo.py", marker))
        ops = op_nodes(tree, op, line)
        assert sum(tree.exclusive(n, "op.count") for n in ops) == count, marker
        if context.endswith("native"):
            (node,) = ops
            assert any(f.kind == "native" and "THPVariable_" in f.name
                       for f in kinds_between(tree, line, node))


def test_profile_says_which_unwinder_ran(tmp_path):
    from deepcontext import _core

    # Operator events only: a CPU sample that lands while the interpreter is between frames can
    # leave its native stack unpaired (1 in 10-20 runs of this program on a loaded machine,
    # with or without the nested layer), and is counted there; operator events never are.
    proc, out = record(tmp_path, "native_memo.py",
                       options=("--context", "python,op,native", "--sample-interval", "0"))
    assert proc.returncode == 0, proc.stderr
    meta = loaded(out).metadata
    assert meta["native"]["unwinder"] == _core.native_info()["unwinder"]
    assert meta["native"]["unpaired_events"] == 0


def test_intra_op_workers_time_goes_to_the_operator_that_dispatched_it(tmp_path):
    # torch's OpenMP workers run no Python and no operator callback: they are measured by their
    # CPU clocks, never interrupted, and their time goes to the operator open on the thread that
    # dispatched the parallel region: "<the matmul line> / ... aten::mm / [thread] worker"
    proc, out = record(tmp_path, "intraop_threads.py",
                       options=("--context", "python,op,native", "--sample-interval", "0.002"))
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    matmul = python_nodes(tree, "intraop_threads.py", line_of("intraop_threads.py", "MATMUL"))
    under = set().union(*(subtree_ids(tree, m) for m in matmul))
    workers = [n for n in tree.nodes if n.frame.kind == "thread" and n.frame.name == "worker"]
    charged = [w for w in workers if w.id in under]
    assert charged and all(tree.nodes[w.parent].frame.kind == "op" for w in charged)
    worker_time = sum(tree.inclusive(w.id, "cpu.time") for w in charged)
    idle_pool = sum(tree.inclusive(n.id, "cpu.time") for n in tree.nodes
                    if n.frame.kind == "thread" and n.parent == 0)
    assert worker_time > 0.02
    # the pool's time outside any operator (spinning after a region) is the smaller part
    assert worker_time >= idle_pool, (worker_time, idle_pool)

def contexts(tree):
    """Every context of the tree, as its path of frames, with its exclusive counts."""
    def key(i):
        f = tree.nodes[i].frame
        return (f.kind, f.name, f.file, f.line, f.get("offset"))
    return {tuple(key(i) for i in tree.path_ids(n.id)):
            tuple(tree.exclusive(n.id, m) for m in ("op.count", "mem.alloc.count", "mem.alloc.bytes"))
            for n in tree.nodes}


@pytest.mark.parametrize("first_hint", ["4", ""], ids=["hint-4", "default"])
def test_events_inside_an_operator_unwind_only_its_frames_and_place_as_whole_unwinds_do(
        tmp_path, first_hint):
    # An operator or allocation inside an operator unwinds only the frames inside it (up to the
    # outer op's recorded call frame): the tree is the one whole unwinds give, context for context
    # and count for count. With a first hint of 4 frames every event first misses the call frame,
    # unwinds whole and grows the hint.
    options = ("--context", "python,op,nested,native,memory", "--sample-interval", "0")
    trees = {}
    for mode in ("full", first_hint):
        (tmp_path / (mode or "default")).mkdir()
        proc, out = record(tmp_path / (mode or "default"), "linear_train.py", "3", options=options,
                           env={"DEEPCONTEXT_UNWIND_INSIDE": mode})
        assert proc.returncode == 0, proc.stderr
        trees[mode] = loaded(out)
    whole, inside = contexts(trees["full"]), contexts(trees[first_hint])
    assert inside == whole
    # (what is compared: the nested op under its native frames, allocations inside operators)
    tree = trees[first_hint]
    (fwd,) = python_nodes(tree, "linear_train.py", line_of("linear_train.py", "FORWARD"))
    (linear,) = op_nodes(tree, "aten::linear", fwd)
    (addmm,) = op_nodes(tree, "aten::addmm", linear)
    assert any(f.kind == "native" for f in kinds_between(tree, linear, addmm))
    assert tree.inclusive(addmm, "mem.alloc.count") == 3
