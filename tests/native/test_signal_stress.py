"""CPU samples with native frames taken while frames are being linked and unlinked never crash
the process (the signal-time Python walk stops at implausible pointers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = Path(__file__).parent / "_signal_stress.py"


@pytest.mark.slow
@pytest.mark.parametrize("run", range(3))
def test_sampling_through_frame_churn(tmp_path, run):
    if os.environ.get("DEEPCONTEXT_CORE_DIR"):
        pytest.skip("records with the installed package, not a standalone core")
    out = tmp_path / "stress.dcprof"
    proc = subprocess.run(
        [sys.executable, "-m", "deepcontext", "record", "-o", str(out), "--context",
         "python,native", "--sample-interval", "0.0002", "--", sys.executable, str(PROGRAM), "1.0"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip().endswith("ok")
    from deepcontext.tree import load

    tree = load(out)
    assert any(n.frame.kind == "python" and n.frame.name == "churn" for n in tree.nodes)


@pytest.mark.slow
def test_fresh_threads_sampled_inside_malloc_do_not_deadlock(tmp_path):
    if os.environ.get("DEEPCONTEXT_CORE_DIR"):
        pytest.skip("records with the installed package, not a standalone core")
    program = Path(__file__).parent / "_fresh_threads_malloc.py"
    out = tmp_path / "fresh.dcprof"
    proc = subprocess.run(
        [sys.executable, "-m", "deepcontext", "record", "-o", str(out), "--context",
         "python,native", "--sample-interval", "0.0002", "--", sys.executable, str(program)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "ok"
