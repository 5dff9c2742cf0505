"""Profiled CUDA processes exit cleanly (status 0, no glibc abort) after several sessions."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu


def test_multi_session_cuda_process_exits_cleanly():
    program = Path(__file__).parent / "programs" / "multi_session_exit.py"
    proc = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "corruption" not in proc.stderr and "free()" not in proc.stderr
    assert len(proc.stdout.splitlines()) == 3
