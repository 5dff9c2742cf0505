"""Native frames on the GPU path: a cuDNN convolution's kernels sit under
user line -> aten op -> native frames (cuDNN) -> kernel."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deepcontext.tree import load

pytestmark = pytest.mark.gpu

PROGRAM = Path(__file__).parent / "programs" / "cudnn_conv.py"


def test_cudnn_kernel_has_native_frames_between_operator_and_kernel(tmp_path):
    out = tmp_path / "conv.dcprof"
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", str(out),
                           "--context", "python,op,native,gpu", "--", sys.executable, str(PROGRAM)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    tree = load(out)
    line = next(i for i, t in enumerate(PROGRAM.read_text().splitlines(), 1) if "# CONV" in t)
    kernels = [n for n in tree.nodes if n.frame.kind == "kernel"
               and any(f.kind == "python" and f.file == str(PROGRAM) and f.line == line
                       for f in tree.path(n.id))]
    assert kernels, "the convolution's kernels are under its line"
    conv_time = sum(tree.exclusive(n.id, "gpu.time") for n in kernels)
    spliced = 0.0
    for k in kernels:
        path = tree.path(k.id)
        last_op = max(i for i, f in enumerate(path) if f.kind == "op")
        between = path[last_op + 1:-1]
        if between and all(f.kind == "native" for f in between) and any(
                "cudnn" in (f.name + f.file).lower() for f in between):
            spliced += tree.exclusive(k.id, "gpu.time")
    # cuDNN also launches helper kernels from paths with fewer native frames; the convolution's
    # own kernels (most of the time) carry the cuDNN frames.
    assert spliced >= 0.5 * conv_time > 0
