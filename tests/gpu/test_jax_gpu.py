"""The JAX layer on XLA:GPU (JAX's CUDA plugin): kernels under their JAX operators and source
lines under the calling line, command buffers off, compile markers, backward under forward.

Run on a GPU machine with jax[cuda]: python3 -m pytest -q -m gpu tests/gpu/test_jax_gpu.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deepcontext.tree import Frame, load

pytestmark = pytest.mark.gpu

PROGRAMS = Path(__file__).parents[1] / "integration" / "programs"
PROG = "jax_train.py"
N = 4


def _jax_gpu() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import jax; print(jax.default_backend())"],
                           capture_output=True, text=True, timeout=300)
    return probe.returncode == 0 and probe.stdout.strip() == "gpu"


def _line(marker: str) -> int:
    for i, text in enumerate((PROGRAMS / PROG).read_text().splitlines(), 1):
        if f"# {marker}" in text:
            return i
    raise AssertionError(marker)


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    if not _jax_gpu():
        pytest.skip("jax has no GPU backend here")
    tmp = tmp_path_factory.mktemp("jaxgpu")
    out = tmp / "jax.dcprof"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", str(out), "--",
                           sys.executable, str(PROGRAMS / PROG), str(N)], capture_output=True,
                          text=True, timeout=600, cwd=tmp, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"done {N} ")
    tree = load(out)
    tree.self_check()
    return tree


def _line_nodes(tree, marker):
    return [n.id for n in tree.nodes if n.frame.kind == "python" and n.frame.file.endswith(PROG)
            and n.frame.line == _line(marker)]


def _child(tree, parent, kind, name):
    found = [c for c in tree.nodes[parent].children
             if tree.nodes[c].frame.kind == kind and tree.nodes[c].frame.name == name]
    assert len(found) == 1, [tree.nodes[c].frame for c in tree.nodes[parent].children]
    return found[0]


def _fused_ops(tree, kernel):
    parent = tree.nodes[tree.nodes[kernel].parent].frame
    if parent.kind == "marker" and parent.name.startswith("fused 1/"):
        return int(parent.name.removeprefix("fused 1/"))
    return 1


def test_kernels_under_operators_under_lines_under_the_call(profile):
    tree = profile
    calls = [n for n in _line_nodes(tree, "CALL") if tree.nodes[n].frame.name == "main"]
    (call,) = calls
    jit = _child(tree, call, "op", "jit(predict)")
    assert tree.exclusive(jit, "op.count") == N
    (dot_line,) = [c for c in tree.nodes[jit].children if tree.nodes[c].frame.line == _line("DOT")]
    dot = _child(tree, dot_line, "op", "jit(predict)/dot_general")
    assert tree.exclusive(dot, "op.count") >= N  # one per kernel that ran part of it
    kernels = [n.id for n in tree.walk(dot) if n.frame.kind == "kernel"]
    assert kernels and all(tree.nodes[k].frame.get("device") == "gpu" for k in kernels)
    # a kernel fusing k operators is charged 1/k of each launch per operator (fused 1/k)
    assert sum(tree.inclusive(k, "gpu.launches") * _fused_ops(tree, k) for k in kernels) >= N
    assert tree.inclusive(dot, "gpu.time") > 0


def test_command_buffers_are_off_and_gpu_time_has_a_python_line(profile):
    tree = profile
    assert not [n for n in tree.nodes if n.frame.kind == "kernel"
                and n.frame.get("hlo_op").startswith("command_buffer")]
    assert not [n for n in tree.nodes if n.frame == Frame.make("marker", "command buffer")]
    jax_kernels = [n for n in tree.nodes if n.frame.kind == "kernel" and n.frame.get("hlo_op")]
    assert sum(tree.exclusive(n.id, "gpu.time") for n in jax_kernels) > 0
    for n in jax_kernels:  # every kernel XLA ran for the program has its Python line
        assert any(f.kind == "python" for f in tree.path(n.id)), tree.path(n.id)
    assert any("handed to the JAX profiler" in n for n in tree.metadata["notes"])


def test_backward_kernels_under_the_forward_line_and_compile_markers(profile):
    tree = profile
    (step,) = [n for n in _line_nodes(tree, "STEP") if tree.nodes[n].frame.name == "main"]
    train = _child(tree, step, "marker", "train")
    jit = _child(tree, train, "op", "jit(loss)")
    assert tree.exclusive(jit, "op.count") == N
    (fwd,) = [c for c in tree.nodes[jit].children if tree.nodes[c].frame.line == _line("FORWARD")]
    bwd = _child(tree, fwd, "marker", "backward")
    assert tree.inclusive(bwd, "gpu.time") > 0
    compile_jit = _child(tree, step, "op", "jit(loss)")
    compile_ = _child(tree, compile_jit, "marker", "compile")
    assert tree.exclusive(compile_, "compile.count") == 1
    assert tree.inclusive(compile_, "compile.time") > 0
