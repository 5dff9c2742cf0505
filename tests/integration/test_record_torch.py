"""``deepcontext record`` on real PyTorch programs: exact operator structure under the user's lines."""

import pytest

torch = pytest.importorskip("torch")

from deepcontext.tree import Frame  # noqa: E402
from helpers import children_named, line_of, loaded, python_nodes, record, subtree_ids  # noqa: E402

PROG = "linear_train.py"


@pytest.fixture(scope="module")
def linear_profile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("linear")
    proc, out = record(tmp, PROG, "5")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "trained 5\n"
    return loaded(out)


def _forward_linear(tree):
    fwd = python_nodes(tree, PROG, line_of(PROG, "FORWARD"))
    assert len(fwd) == 1, "the model(x) line is one context"
    linears = [n for n in subtree_ids(tree, fwd[0])
               if tree.nodes[n].frame.kind == "op" and tree.nodes[n].frame.name == "aten::linear"]
    assert len(linears) == 1
    return linears[0]


def test_forward_line_has_linear_with_exact_count_and_its_calls_hidden(linear_profile):
    tree = linear_profile
    linear = _forward_linear(tree)
    assert tree.exclusive(linear, "op.count") == 5
    assert tree.exclusive(linear, "op.time") > 0
    # by default the operators aten::linear calls (aten::t, aten::addmm) are not recorded
    assert [tree.nodes[c].frame.name for c in tree.nodes[linear].children] == []


def test_nested_layer_shows_linear_then_addmm_with_exact_count(tmp_path):
    proc, out = record(tmp_path, PROG, "5", options=("--context", "python,op,nested"))
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    linear = _forward_linear(tree)
    assert tree.exclusive(linear, "op.count") == 5
    (addmm,) = children_named(tree, linear, "op", "aten::addmm")
    assert tree.exclusive(addmm, "op.count") == 5
    assert tree.exclusive(addmm, "op.time") > 0


def test_backward_ops_hang_under_the_forward_line(linear_profile):
    tree = linear_profile
    fwd = python_nodes(tree, PROG, line_of(PROG, "FORWARD"))[0]
    # under the forward line (through nn.Module frames) sits one "backward" marker
    markers = [n for n in subtree_ids(tree, fwd) if tree.nodes[n].frame == Frame("marker", "backward")]
    assert len(markers) == 1
    (node,) = children_named(tree, markers[0], "op", "AddmmBackward0")
    assert tree.exclusive(node, "op.count") == 5
    assert children_named(tree, node, "op", "aten::mm")
    # what the engine ran for the node after it (the bias gradient reduced to its shape) is
    # under the node too, as in torch's evaluate_function, whose own wrapper is not recorded
    (reduced,) = children_named(tree, node, "op", "aten::sum")
    assert tree.exclusive(reduced, "op.count") == 5
    assert not [n for n in tree.nodes if n.frame.name.startswith("autograd::engine::")]
    # every AddmmBackward0 in the profile is under the forward line, none elsewhere
    everywhere = {n.id for n in tree.nodes if n.frame.name == "AddmmBackward0"}
    assert everywhere == {node}
    (loss,) = python_nodes(tree, PROG, line_of(PROG, "LOSS"))
    (loss_marker,) = children_named(tree, loss, "marker", "backward")
    (sum_node,) = children_named(tree, loss_marker, "op", "SumBackward0")
    assert tree.exclusive(sum_node, "op.count") == 5


def test_no_grad_code_is_attributed(linear_profile):
    tree = linear_profile
    (nograd,) = python_nodes(tree, PROG, line_of(PROG, "NOGRAD"))
    (relu,) = children_named(tree, nograd, "op", "aten::relu")
    assert tree.exclusive(relu, "op.count") == 1


def test_metadata_says_complete_and_names_the_tier(linear_profile):
    meta = linear_profile.metadata
    assert meta["complete"] is True
    assert meta["op_tier"] == "record_function"
    assert meta["torch"] == torch.__version__
    assert meta["command"][-2].endswith(PROG)


def test_dispatch_tier_fallback(tmp_path):
    proc, out = record(tmp_path, PROG, "3", env={"DEEPCONTEXT_TORCH_TIER": "dispatch"})
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    assert tree.metadata["op_tier"] == "dispatch"
    assert any("TorchDispatchMode" in n for n in tree.metadata["notes"])
    fwd = python_nodes(tree, PROG, line_of(PROG, "FORWARD"))[0]
    below = subtree_ids(tree, fwd)
    addmm = [n for n in below if tree.nodes[n].frame.name == "aten::addmm"
             and tree.nodes[tree.nodes[n].parent].frame.kind != "op"]
    assert sum(tree.exclusive(n, "op.count") for n in addmm) == 3
    markers = [n for n in below if tree.nodes[n].frame == Frame("marker", "backward")]
    assert len(markers) == 1
    bw = {tree.nodes[c].frame.name for c in tree.nodes[markers[0]].children}
    assert "AddmmBackward0" in bw


def test_dataloader_with_two_workers_runs_to_completion(tmp_path):
    proc, out = record(tmp_path, "loader_workers.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "total " + str(float(sum(i * i for i in range(64))))
    tree = loaded(out)
    assert tree.metadata["complete"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loader_workers.dcprof"]


def test_stale_build_lock_from_a_killed_build_does_not_hang(tmp_path):
    """A build killed mid-way leaves torch's lock file; the next run must not wait on it."""
    import shutil

    from deepcontext.capture.torch_ops import _hook_name, cache_dir

    cache = tmp_path / "cache"
    shutil.copytree(cache_dir(), cache)  # the hook is already built by the tests above
    hook_dir = cache / "torch_hook" / _hook_name(torch)
    assert hook_dir.is_dir()
    (hook_dir / "lock").write_text("")
    proc, out = record(tmp_path, PROG, "1", env={"DEEPCONTEXT_CACHE": str(cache)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert loaded(out).metadata["op_tier"] == "record_function"
    assert not (hook_dir / "lock").exists()


def test_thread_churn_memory_stays_flat(tmp_path):
    proc, _ = record(tmp_path, "thread_churn.py")
    assert proc.returncode == 0, proc.stderr
    rss_mb = [int(v) for v in proc.stdout.split()]
    # 200 threads a round: each exiting thread's state is reused, so rounds 2-4 add ~nothing
    assert rss_mb[-1] - rss_mb[1] < 20, rss_mb


def test_thread_churn_is_exact(tmp_path):
    proc, out = record(tmp_path, "thread_churn.py")
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    (line,) = python_nodes(tree, "thread_churn.py", line_of("thread_churn.py", "ADD"))
    (add,) = children_named(tree, line, "op", "aten::add")
    assert tree.exclusive(add, "op.count") == 4 * 200 * 50


def test_cpu_time_of_intra_op_worker_threads_is_sampled(tmp_path):
    """torch's OpenMP workers run no Python and no operator callback; their CPU time still shows,
    under the operator that dispatched their work ("aten::mm / [thread] worker" below the matmul
    line), instead of vanishing."""
    proc, out = record(tmp_path, "intraop_threads.py", options=("--sample-interval", "0.002"))
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    (line,) = python_nodes(tree, "intraop_threads.py", line_of("intraop_threads.py", "MATMUL"))
    workers = [n for n in tree.walk(line) if n.frame.kind == "thread" and n.frame.name == "worker"]
    assert workers and sum(tree.inclusive(n.id, "cpu.time") for n in workers) > 0.02
    assert all(tree.nodes[n.parent].frame.kind == "op" for n in workers)
    assert tree.inclusive(line, "cpu.time") > 0.02


def test_operators_called_on_intra_op_workers_leave_their_time_with_the_dispatching_operator(tmp_path):
    """CPU flash attention's backward calls aten::empty on each intra-op worker. That call is the
    kernel's own: it is not an event, and the worker stays a worker, its time charged under the
    attention operators. (Recorded, it made the worker a thread of its own: from then on its
    share of every kernel went to `[thread] <name>` at the root, half of this program's time.)"""
    prog = "intraop_worker_calls.py"
    proc, out = record(tmp_path, prog, options=("--sample-interval", "0.002"))
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    assert [n for n in tree.nodes if n.frame == Frame("op", "aten::empty")] == []
    (line,) = python_nodes(tree, prog, line_of(prog, "SDPA"))
    workers = [n for n in tree.walk(line) if n.frame == Frame("thread", "worker")]
    assert all(tree.nodes[n.parent].frame.kind == "op" for n in workers)
    under_ops = sum(tree.inclusive(n.id, "cpu.time") for n in workers)
    at_root = sum(tree.inclusive(c, "cpu.time") for c in tree.nodes[0].children
                  if tree.nodes[c].frame.kind == "thread")
    assert under_ops > 0.1 and at_root < under_ops / 4, (under_ops, at_root)


def _scope(tree, name):
    (scope,) = [n.id for n in tree.nodes if n.frame.kind == "op" and n.frame.name == name]
    return scope


def _op_count(tree, nid, name):
    return sum(tree.exclusive(n, "op.count") for n in subtree_ids(tree, nid)
               if tree.nodes[n].frame == Frame("op", name))


def test_record_function_blocks_keep_their_lines(tmp_path):
    """The body of a record_function block runs after __enter__ (where the scope opened) has
    returned: its operators go below the scope at the block's own lines, and their backward
    with them, however the scope was entered (a `with`, a helper's contextmanager, torch.optim's
    step)."""
    prog = "record_function_blocks.py"
    proc, out = record(tmp_path, prog)
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    fwd = _scope(tree, "fwd")
    # (a CPU sample in the block's __exit__, the scope still open, adds a `with` line node below
    # the scope: the line where that frame is then; a CI run caught one)
    inside = subtree_ids(tree, fwd)
    (with_line,) = [n for n in python_nodes(tree, prog, line_of(prog, "WITH")) if n not in inside]
    assert fwd in subtree_ids(tree, with_line)
    (body,) = python_nodes(tree, prog, line_of(prog, "BODY"))
    (loss,) = python_nodes(tree, prog, line_of(prog, "LOSS"))
    assert tree.nodes[body].parent == fwd and tree.nodes[loss].parent == fwd
    assert _op_count(tree, body, "aten::linear") == 3 * 2
    assert _op_count(tree, body, "aten::relu") == 3
    assert _op_count(tree, loss, "aten::sum") == 3
    assert _op_count(tree, body, "AddmmBackward0") == 3 * 2
    assert _op_count(tree, loss, "SumBackward0") == 3
    # entered in a generator that is suspended while the block runs: the `with` line's frame
    # (three frames out from the scope's own) is where its body hangs
    scaled = _scope(tree, "scaled")
    (helper_body,) = python_nodes(tree, prog, line_of(prog, "HELPER_BODY"))
    assert tree.nodes[helper_body].parent == scaled
    assert _op_count(tree, helper_body, "aten::mul") == 3
    # torch.optim's step scope: the single-tensor loop's lines inside it, every update there
    (step_line,) = python_nodes(tree, prog, line_of(prog, "STEP"))
    step = next(n for n in subtree_ids(tree, step_line)
                if tree.nodes[n].frame.kind == "op" and tree.nodes[n].frame.name.startswith("Optimizer.step#"))
    loops = [n for n in subtree_ids(tree, step)
             if tree.nodes[n].frame.kind == "python" and tree.nodes[n].frame.name == "_single_tensor_adam"]
    assert loops
    assert sum(_op_count(tree, n, "aten::addcdiv_") for n in loops) == 3 * 4
    assert _op_count(tree, step, "aten::addcdiv_") == 3 * 4


def test_a_program_that_profiles_itself_runs_as_alone_under_record(tmp_path):
    program = "own_session_under_record.py"
    proc, out = record(tmp_path, program, options=("--context", "python,op"))
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "done\n"
    said = [ln for ln in proc.stderr.splitlines() if "records nothing" in ln]
    assert said == [f"deepcontext: the program's own session ({name}) records nothing: "
                    f"`deepcontext record` profiles the whole run into {out.name}"
                    for name in ("own.dcprof", "own2.dcprof")]
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]
    tree = loaded(out)
    assert tree.metadata["steps"] == 6  # the program's steps, counted in record's profile
    for marker, calls in (("MM", 6), ("MM2", 1)):  # every step, the schedule's waits included
        (node,) = python_nodes(tree, program, line_of(program, marker))
        ops = children_named(tree, node, "op", "aten::matmul")
        assert [tree.exclusive(c, "op.count") for c in ops] == [calls]
