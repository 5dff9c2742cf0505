"""torch.compile on a real GPU: Inductor's Triton kernels and the cuBLAS matmul under the model
lines they came from (forward and backward), reduce-overhead CUDA graph replays under their
capture context, compilation out of the host-time findings.

Run on a GPU machine: python3 -m pytest -q -m gpu tests/gpu/test_compile_gpu.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deepcontext.tree import load, views

pytestmark = pytest.mark.gpu

PROGRAMS = Path(__file__).parent / "programs"
PROG = "compiled_gpu.py"
STEPS, REPLAYS = 6, 5  # the program's constants


def line_of(marker: str) -> int:
    for i, text in enumerate((PROGRAMS / PROG).read_text().splitlines(), 1):
        if text.rstrip().endswith(f"# {marker}"):
            return i
    raise AssertionError(f"no marker {marker} in {PROG}")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("compile-gpu")
    out = tmp / "compiled.dcprof"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor-cache")}
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", str(out), "--",
                           sys.executable, str(PROGRAMS / PROG)], capture_output=True, text=True,
                          cwd=tmp, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("loss ")
    analyzed = subprocess.run([sys.executable, "-m", "deepcontext", "analyze", str(out),
                               "--format", "json"], capture_output=True, text=True)
    assert analyzed.returncode == 0, analyzed.stderr
    return load(out), json.loads(analyzed.stdout)["findings"]


def _line_node(tree, line):
    nodes = [n.id for n in tree.nodes if n.frame.kind == "python"
             and n.frame.file.endswith(PROG) and n.frame.line == line and n.frame.name == "main"]
    assert len(nodes) == 1, nodes
    return nodes[0]


def _kernels(tree, root):
    """(kernel node, nearest python frame, in backward, under a cuda graph) below ``root``,
    outside compilation."""
    out = []
    for n in tree.walk(root):
        if n.frame.kind != "kernel":
            continue
        path = [tree.nodes[a].frame for a in tree.path_ids(n.id)]
        if any(f.kind == "marker" and f.name == "compile" for f in path):
            continue
        py = next(f for f in reversed(path) if f.kind == "python")
        out.append((n, py, any(f.kind == "marker" and f.name == "backward" for f in path),
                    any(f.kind == "marker" and f.name == "cuda graph" for f in path)))
    return out


def test_triton_kernels_sit_under_their_source_lines(recorded):
    tree = views.user_frames(recorded[0])
    model_lines = {line_of(m) for m in ("RELU_MM", "MUL_ADD", "SUM")}
    launches: dict[tuple[str, bool], float] = {}
    for node, py, backward, graph in _kernels(tree, _line_node(tree, line_of("CALL"))):
        assert not graph
        assert py.file.endswith(PROG) and py.line in model_lines, (node.frame.name, py)
        if node.frame.name.startswith("triton_"):
            key = (node.frame.name, backward)
            launches[key] = launches.get(key, 0.0) + node.metrics.get("gpu.launches", 0.0)
    assert any(not b for _, b in launches) and any(b for _, b in launches), launches
    for key, value in launches.items():
        assert value == pytest.approx(STEPS), key


def test_cublas_matmul_under_the_matmul_line(recorded):
    tree = views.user_frames(recorded[0])
    forward_mm = [n for n, py, backward, _ in _kernels(tree, _line_node(tree, line_of("CALL")))
                  if not backward and not n.frame.name.startswith("triton_")]
    assert forward_mm
    for n in forward_mm:
        parent = tree.nodes[n.parent].frame
        assert parent.kind == "op" and parent.name == "aten::mm"
        py = next(f for f in reversed(tree.path(n.id)) if f.kind == "python")
        assert py.line == line_of("RELU_MM")


def test_reduce_overhead_replays_under_their_capture_context(recorded):
    tree = views.user_frames(recorded[0])
    model_lines = {line_of(m) for m in ("RELU_MM", "MUL_ADD", "SUM")}
    replayed = [k for k in _kernels(tree, _line_node(tree, line_of("REPLAY"))) if k[3]]
    assert replayed
    per_kernel: dict[str, float] = {}
    for node, py, _, _ in replayed:
        assert py.file.endswith(PROG) and py.line in model_lines, (node.frame.name, py)
        per_kernel[node.frame.name] = per_kernel.get(node.frame.name, 0.0) + node.metrics.get(
            "gpu.launches", 0.0)
    for name, value in per_kernel.items():
        assert value == pytest.approx(REPLAYS), name


def test_totals_are_kept_and_generated_frames_fold(recorded):
    tree = recorded[0]
    assert tree.total("gpu.time") == pytest.approx(tree.metadata["gpu"]["kernel_time"], rel=0.01)
    folded = views.user_frames(tree)
    assert not [n for n in folded.nodes if n.frame.get("generated")]
    assert [n for n in tree.nodes if n.frame.get("generated") == "inductor"]
    assert tree.metadata["torch_compile"]["kernel_calls_without_provenance"] == 0


def test_compile_is_not_launch_latency(recorded):
    """The call line may be launch-bound in its steady state, but the compile (tens of seconds
    of host time at that line) is never counted as launch overhead."""
    tree, findings = recorded
    compile_s = sum(c["seconds"] for c in tree.metadata["torch_compile"]["compiles"])
    assert compile_s > 0
    for f in findings:
        if f["rule"] == "cpu-latency" and f["location"]["line"] == line_of("CALL"):
            assert f["evidence"]["host_time_s"] < 0.5 * compile_s, f
