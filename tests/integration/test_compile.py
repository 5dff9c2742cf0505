"""torch.compile on the CPU (Inductor's C++ backend, real compiles): kernels under the model
lines they came from, forward and backward; compilation under ``[marker] compile``; the same
result when Inductor's caches are warm."""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from deepcontext.tree import views  # noqa: E402
from helpers import PROGRAMS, line_of, loaded, python_nodes, record, subtree_ids  # noqa: E402

# three real compiles (plain, cold, warm) in one fixture: a minute or two on an idle 2-core machine
pytestmark = pytest.mark.timeout(1200)

PROG = "compiled_mlp.py"
STEPS = 4


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One Inductor cache: the program run without the profiler (its cache entries carry no
    provenance), then recorded twice: "cold" must not reuse those entries, "warm" reuses its own."""
    tmp = tmp_path_factory.mktemp("compile")
    # one compile thread: no worker pool to start on a small machine
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor-cache"),
           "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    plain = subprocess.run([sys.executable, str(PROGRAMS / PROG), str(STEPS)], capture_output=True,
                           text=True, env={**os.environ, **env}, timeout=900)
    assert plain.returncode == 0, plain.stderr
    out = {}
    for name in ("cold", "warm"):
        d = tmp / name
        d.mkdir()
        proc, path = record(d, PROG, str(STEPS), env=env, timeout=900)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("loss "), proc.stdout
        out[name] = (loaded(path), path)
    return out


def _kernels_by_line(tree, root):
    """{(source line, op name, in backward): exclusive op.count} for ops under model lines."""
    found = {}
    for nid in subtree_ids(tree, root):
        node = tree.nodes[nid]
        if node.frame.kind != "op":
            continue
        parent = tree.nodes[node.parent].frame
        if parent.kind != "python" or not parent.file.endswith(PROG) or parent.line == 0:
            continue
        backward = any(tree.nodes[a].frame.name == "backward" and tree.nodes[a].frame.kind == "marker"
                       for a in tree.path_ids(nid))
        key = (parent.line, node.frame.name, backward)
        found[key] = found.get(key, 0) + tree.exclusive(nid, "op.count")
    return found


def _call_node(tree):
    (call,) = python_nodes(tree, PROG, line_of(PROG, "CALL"))
    return call


@pytest.mark.parametrize("which", ["cold", "warm"])
def test_kernels_sit_under_the_model_lines_fused_into_them(runs, which):
    tree = views.user_frames(runs[which][0])
    relu_mm, mul_add, total = (line_of(PROG, m) for m in ("RELU_MM", "MUL_ADD", "SUM"))
    found = _kernels_by_line(tree, _call_node(tree))
    fwd = {k: v for k, v in found.items() if not k[2] and "cpp_fused" in k[1]}
    # one fused forward kernel (relu, mul, add, sum and relu's mask for backward): a third
    # of its 4 calls to each of its three source lines
    names = {k[1] for k in fwd}
    assert len(names) == 1, fwd
    (fused,) = names
    assert "relu" in fused and "mul" in fused and "add" in fused
    assert {k[0] for k in fwd} == {relu_mm, mul_add, total}
    for value in fwd.values():
        assert value == pytest.approx(STEPS / 3)
    # the matmul is an extern kernel (aten::mm) called once per step from the relu(x @ w) line
    assert found[(relu_mm, "aten::mm", False)] == STEPS
    assert not any(k[1] == "aten::mm" and k[0] != relu_mm for k in found)


@pytest.mark.parametrize("which", ["cold", "warm"])
def test_backward_kernels_sit_under_the_forward_lines(runs, which):
    tree = views.user_frames(runs[which][0])
    relu_mm, mul_add, total = (line_of(PROG, m) for m in ("RELU_MM", "MUL_ADD", "SUM"))
    found = _kernels_by_line(tree, _call_node(tree))
    bwd = {k: v for k, v in found.items() if k[2]}
    fused = {k for k in bwd if "cpp_fused" in k[1]}
    assert {k[0] for k in fused} == {relu_mm, mul_add, total}
    assert all("threshold_backward" in k[1] for k in fused)
    assert sum(bwd[k] for k in fused) == pytest.approx(STEPS)
    # the weight gradient's matmul (x needs no gradient: one mm)
    assert bwd[(relu_mm, "aten::mm", True)] == STEPS


def test_generated_wrapper_frames_fold_away_by_default(runs):
    raw = runs["cold"][0]
    generated = [n for n in raw.nodes if n.frame.get("generated") == "inductor"]
    assert generated, "the wrapper's frames are kept (report --all-frames shows them)"
    assert all(n.frame.name.endswith("call") or n.frame.name == "<module>" for n in generated)
    folded = views.user_frames(raw)
    assert not [n for n in folded.nodes if n.frame.get("generated")]


def test_compilation_is_a_marker_under_the_call_line(runs):
    tree, _ = runs["cold"]
    folded = views.user_frames(tree)
    call = _call_node(folded)
    markers = [n for n in subtree_ids(folded, call)
               if folded.nodes[n].frame.kind == "marker" and folded.nodes[n].frame.name == "compile"]
    # the forward compile (Dynamo) and the lazily compiled backward
    assert sum(folded.exclusive(m, "compile.count") for m in markers) == 2
    assert all(folded.exclusive(m, "compile.time") > 0 for m in markers)
    (dynamo,) = [m for m in markers if folded.nodes[m].parent == call]
    phases = {folded.nodes[c].frame.name for c in folded.nodes[dynamo].children}
    assert phases == {"compile: dynamo"}
    inner = {folded.nodes[n].frame.name for n in subtree_ids(folded, dynamo)}
    assert {"compile: aot autograd", "compile: inductor"} <= inner
    info = tree.metadata["torch_compile"]
    assert [c["trigger"] for c in info["compiles"]] == ["DYNAMO", "LAZY_BACKWARD"]
    assert info["compiles"][0]["at"]["line"] == line_of(PROG, "CALL")
    assert info["compiles"][0]["co_name"] == "forward"
    assert info["kernel_calls_without_provenance"] == 0
    assert info["graph_breaks"] == []


def test_warm_cache_hits_and_keeps_provenance(runs):
    cold, warm = runs["cold"][0].metadata["torch_compile"], runs["warm"][0].metadata["torch_compile"]
    assert cold["fx_graph_cache"] == {"miss": 2}
    assert warm["fx_graph_cache"] == {"hit": 2}
    assert warm["kernel_calls"] == cold["kernel_calls"] > 0
    assert warm["kernel_calls_without_provenance"] == 0


def test_analyzer_does_not_call_the_compile_host_latency(runs):
    _, path = runs["cold"]
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "analyze", str(path),
                           "--format", "json"], capture_output=True, text=True,
                          env={**os.environ})
    assert proc.returncode in (0, 1), proc.stderr
    findings = json.loads(proc.stdout)["findings"]
    assert not [f for f in findings if f["rule"] == "cpu-latency"]
    compile_notes = [f for f in findings if f["rule"] == "compile-time"]
    assert len(compile_notes) == 1 and compile_notes[0]["severity"] == "note"


def test_code_compiled_before_the_session_keeps_its_wrapper_frames_tagged(tmp_path):
    proc = subprocess.run([sys.executable, str(PROGRAMS / "compiled_before_session.py"),
                           str(tmp_path / "p.dcprof")], capture_output=True, text=True,
                          env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
                               "TORCHINDUCTOR_COMPILE_THREADS": "1"}, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "ok"
