"""``deepcontext record`` on a real jitted JAX program (XLA:CPU): each executed thunk under its
JAX operator, the operator under its source line inside the jitted function, all of it under
the Python line that called the function; backward under the forward line; compile markers with
counts; host round trips.

Runs with ``--sample-interval 0``: the CPU-time sampler aborted on jitted JAX programs before the
core's sampler fix (see docs/jax.md); ``test_record_with_the_sampler_on`` covers the default.
"""

from collections import defaultdict

import pytest

pytest.importorskip("jax")

from deepcontext.tree import Frame  # noqa: E402
from helpers import children_named, line_of, loaded, python_nodes, record, subtree_ids  # noqa: E402

PROG = "jax_train.py"
N = 4
CPU = {"JAX_PLATFORMS": "cpu"}  # the XLA:CPU path, also on a GPU machine (GPU: tests/gpu)


@pytest.fixture(scope="module")
def jax_profile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("jax")
    proc, out = record(tmp, PROG, str(N), options=("--sample-interval", "0"), env=CPU)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"done {N} ")
    return loaded(out)


def _jit_under(tree, marker, name, through=()):
    """The ``[op] <name>`` node right under the line ``marker`` (through marker frames)."""
    (line,) = python_nodes(tree, PROG, line_of(PROG, marker))
    parent = line
    for m in through:
        (parent,) = children_named(tree, parent, "marker", m)
    found = children_named(tree, parent, "op", name)
    assert len(found) == 1, [tree.nodes[c].frame for c in tree.nodes[parent].children]
    return found[0]


def _source_child(tree, parent, marker, function):
    line = line_of(PROG, marker)
    kids = [c for c in tree.nodes[parent].children
            if tree.nodes[c].frame.kind == "python" and tree.nodes[c].frame.line == line
            and tree.nodes[c].frame.name == function and tree.nodes[c].frame.file.endswith(PROG)]
    assert len(kids) == 1, [tree.nodes[c].frame for c in tree.nodes[parent].children]
    return kids[0]


def test_operators_under_their_lines_under_the_call_line(jax_profile):
    tree = jax_profile
    jit = _jit_under(tree, "CALL", "jit(predict)")
    assert tree.exclusive(jit, "op.count") == N  # one per call of predict at that line
    dot_line = _source_child(tree, jit, "DOT", "predict")
    (dot,) = children_named(tree, dot_line, "op", "jit(predict)/dot_general")
    assert tree.nodes[dot].frame.get("primitive") == "dot_general"
    assert tree.exclusive(dot, "op.count") == N
    assert tree.inclusive(dot, "op.time") > 0
    kernels = [c for c in tree.nodes[dot].children if tree.nodes[c].frame.kind == "kernel"]
    assert kernels and all(tree.nodes[k].frame.get("device") == "cpu" for k in kernels)
    tanh_line = _source_child(tree, jit, "TANH", "predict")
    (tanh,) = children_named(tree, tanh_line, "op", "jit(predict)/tanh")
    assert tree.exclusive(tanh, "op.count") == N


def test_each_call_site_is_its_own_context(jax_profile):
    tree = jax_profile
    for marker in ("CALL2", "RESHAPE"):
        jit = _jit_under(tree, marker, "jit(predict)")
        assert tree.exclusive(jit, "op.count") == 1
        dot_line = _source_child(tree, jit, "DOT", "predict")
        (dot,) = children_named(tree, dot_line, "op", "jit(predict)/dot_general")
        assert tree.exclusive(dot, "op.count") == 1
    # no operator of predict anywhere but under its three call lines
    calls = {n for m in ("CALL", "CALL2", "RESHAPE") for n in python_nodes(tree, PROG, line_of(PROG, m))}
    for node in tree.nodes:
        if node.frame.name == "jit(predict)/dot_general":
            assert set(tree.path_ids(node.id)) & calls


def test_backward_operators_sit_under_the_forward_line(jax_profile):
    tree = jax_profile
    jit = _jit_under(tree, "STEP", "jit(loss)", through=("train",))
    assert tree.exclusive(jit, "op.count") == N
    fwd = _source_child(tree, jit, "FORWARD", "loss")
    (dot,) = children_named(tree, fwd, "op", "jit(loss)/jvp()/dot_general")
    assert tree.exclusive(dot, "op.count") == N
    (tanh,) = children_named(tree, fwd, "op", "jit(loss)/jvp()/tanh")
    assert tree.exclusive(tanh, "op.count") == N
    (bwd,) = children_named(tree, fwd, "marker", "backward")
    names = {tree.nodes[c].frame.name for c in tree.nodes[bwd].children}
    assert "jit(loss)/transpose(jvp())/transpose" in names  # the dot's transpose: dL/dw
    assert all("transpose(" in n for n in names)
    # every transposed op in the profile is under a backward marker
    for node in tree.nodes:
        if node.frame.kind == "op" and "transpose(jvp" in node.frame.name:
            assert tree.nodes[node.parent].frame.kind == "marker"
            assert Frame.make("marker", "backward") in tree.path(node.id)


def test_named_scope_is_a_marker(jax_profile):
    tree = jax_profile
    jit = _jit_under(tree, "STEP", "jit(loss)", through=("train",))
    head = _source_child(tree, jit, "HEAD", "loss")
    (scope,) = children_named(tree, head, "marker", "head")
    (total,) = children_named(tree, scope, "op", "jit(loss)/jvp(head)/reduce_sum")
    assert tree.exclusive(total, "op.count") == N
    (bwd,) = children_named(tree, head, "marker", "backward")
    assert children_named(tree, bwd, "marker", "head")


def test_fused_kernels_are_split_equally_among_their_operators(jax_profile):
    tree = jax_profile
    groups = defaultdict(list)  # (dispatching jit node, kernel frame) -> shares
    fused = 0
    for node in tree.nodes:
        f = node.frame
        if f.kind == "marker" and f.name.startswith("fused 1/"):
            fused += 1
            (kernel,) = node.children
            jit = next(a for a in tree.path_ids(node.id) if tree.nodes[a].frame.name.startswith("jit(")
                       and "/" not in tree.nodes[a].frame.name)
            groups[(jit, tree.nodes[kernel].frame, f.name)].append(tree.exclusive(kernel, "op.time"))
    assert fused >= 2
    for (_, _, name), shares in groups.items():
        assert len(shares) == int(name.split("/")[1])  # every operator of the fusion got its share
        assert max(shares) == pytest.approx(min(shares))


def test_compilations_are_markers_under_the_triggering_line(jax_profile):
    tree = jax_profile
    for marker, name in (("CALL", "jit(predict)"), ("RESHAPE", "jit(predict)"),
                         ("STEP", "jit(loss)")):
        jit = _jit_under(tree, marker, name)
        (compile_,) = children_named(tree, jit, "marker", "compile")
        assert tree.exclusive(compile_, "compile.count") == 1
        phases = {tree.nodes[c].frame.name for c in tree.nodes[compile_].children}
        assert {"trace", "lower to StableHLO", "XLA compile"} <= phases
        assert tree.inclusive(compile_, "compile.time") > 0
    # the second call site reuses the executable: no compilation there
    (call2,) = python_nodes(tree, PROG, line_of(PROG, "CALL2"))
    jit2 = children_named(tree, call2, "op", "jit(predict)")
    assert not children_named(tree, jit2[0], "marker", "compile")


def test_host_round_trips(jax_profile):
    tree = jax_profile
    (wait,) = python_nodes(tree, PROG, line_of(PROG, "WAIT"))
    (sync,) = children_named(tree, wait, "sync", "jax block_until_ready")
    assert tree.exclusive(sync, "sync.count") == 1
    (scalar,) = python_nodes(tree, PROG, line_of(PROG, "SCALAR"))
    copies = [n for n in subtree_ids(tree, scalar)
              if tree.nodes[n].frame == Frame.make("sync", "jax device-to-host copy")]
    assert len(copies) == 1
    assert tree.exclusive(copies[0], "sync.count") == N


def test_profile_metadata_names_the_versions(jax_profile):
    import jax

    meta = jax_profile.metadata
    assert meta["jax"] == jax.__version__
    assert meta["jax_layer"]["executions"] > 0
    assert "jax" in meta["context"]


def test_without_the_jax_layer_nothing_is_patched(tmp_path):
    proc, out = record(tmp_path, PROG, "2", options=("--sample-interval", "0",
                                                     "--context", "python,op"), env=CPU)
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    assert not [n for n in tree.nodes if n.frame.name.startswith("jit(")]
    assert "jax_layer" not in tree.metadata


def test_record_with_the_sampler_on(tmp_path):
    """The default CPU sampler beside the JAX layer (needs the core's sampler fix for jitted JAX
    programs): same operators, same counts, and XLA's worker threads sampled."""
    proc, out = record(tmp_path, PROG, str(N), env=CPU)
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    jit = _jit_under(tree, "CALL", "jit(predict)")
    assert tree.exclusive(jit, "op.count") == N
    dot_line = _source_child(tree, jit, "DOT", "predict")
    (dot,) = children_named(tree, dot_line, "op", "jit(predict)/dot_general")
    assert tree.exclusive(dot, "op.count") == N


def test_the_hotspot_rule_names_a_source_line_inside_the_jitted_functions(jax_profile):
    from deepcontext.analysis import analyze
    from deepcontext.analysis.rules.hotspot import HotspotRule

    findings = analyze(jax_profile, rules=[HotspotRule()])
    assert findings
    inside = {line_of(PROG, m) for m in ("DOT", "TANH", "FORWARD", "HEAD")}
    for f in findings:
        assert f.location.file.endswith(PROG) and f.location.line in inside, f.title
        assert f.evidence["op.time"] > 0
