"""Declared hooks on the real CUDA runtime (libcudart loaded by PyTorch), without CUPTI
(--context python,op): exact calls and bytes per line. Run: python3 -m pytest -q -m gpu tests/gpu"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deepcontext.tree import load

pytestmark = pytest.mark.gpu

PROGRAM = Path(__file__).parent / "programs" / "cudart_hooks.py"
FIND_CUDART = """
import ctypes, torch
torch.zeros(1, device="cuda")
path = next((l.split()[-1] for l in open("/proc/self/maps") if "/libcudart.so" in l), "")
print(path, hasattr(ctypes.CDLL(path), "__cudaLaunchKernel") if path else "")
"""


def constant(name: str) -> int:
    tree = ast.parse(PROGRAM.read_text())
    # eval of the constant's expression only (e.g. `N = 1 << 20`: literal_eval refuses shifts)
    return next(eval(compile(ast.Expression(n.value), str(PROGRAM), "eval"), {})
                for n in tree.body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == name for t in n.targets))


def line_of(marker: str) -> int:
    return next(i for i, t in enumerate(PROGRAM.read_text().splitlines(), 1)
                if t.rstrip().endswith(f"# {marker}"))


def test_cudart_calls_per_line(tmp_path):
    found = subprocess.run([sys.executable, "-c", FIND_CUDART], capture_output=True, text=True,
                           timeout=300).stdout.split()
    if not found:
        pytest.skip("this PyTorch links the CUDA runtime statically (no libcudart.so mapped)")
    cudart = found[0]
    # CUDA 13's <<<>>> launch stubs call __cudaLaunchKernel (crt/host_runtime.h), not
    # cudaLaunchKernel, which only explicit calls use
    launch = "__cudaLaunchKernel" if found[1] == "True" else "cudaLaunchKernel"
    hooks = tmp_path / "cuda.toml"
    hooks.write_text(
        f'[[hook]]\nlibrary = "{cudart}"\nfunction = "{launch}"\nkind = "launch"\n\n'
        f'[[hook]]\nlibrary = "{cudart}"\nfunction = "cudaMemcpyAsync"\nkind = "copy"\nbytes_arg = 2\n\n'
        f'[[hook]]\nlibrary = "{cudart}"\nfunction = "cudaDeviceSynchronize"\nkind = "sync"\n')
    out = tmp_path / "cuda.dcprof"
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", str(out),
                           "--context", "python,op", "--hooks", str(hooks), "--",
                           sys.executable, str(PROGRAM)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    n, reps = constant("N"), constant("REPS")
    assert proc.stdout == f"sum {2 * n}\n"
    tree = load(out)

    def hooks_under(marker: str) -> dict[str, dict[str, float]]:
        got: dict[str, dict[str, float]] = {}
        for node in tree.nodes:
            if node.frame.kind != "hook":
                continue
            lines = [f for f in tree.path(node.id) if f.kind == "python" and f.file == str(PROGRAM)]
            if lines and lines[-1].line == line_of(marker):
                into = got.setdefault(node.frame.name, {})
                for k, v in node.metrics.items():
                    into[k] = into.get(k, 0.0) + v
        return got

    assert hooks_under("MUL")[launch]["hook.count"] == reps
    copy = hooks_under("COPY")["cudaMemcpyAsync"]
    assert copy["hook.count"] == 1 and copy["hook.bytes"] == 4 * n
    sync = hooks_under("SYNC")["cudaDeviceSynchronize"]
    assert sync["hook.count"] == 1 and sync["sync.count"] == 1 and sync["sync.wait"] > 0
    assert {h["function"]: h["loaded"] for h in tree.metadata["hooks"]} == {
        launch: True, "cudaMemcpyAsync": True, "cudaDeviceSynchronize": True}
