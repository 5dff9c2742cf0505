"""GPU layer on a machine without a usable GPU: one clear note, CPU profiling unharmed; and
the search for libcupti in the nvidia-* wheels."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deepcontext.monitor import gpu
from deepcontext.tree import load

PROGRAM = "total = 0\nfor i in range(200000):\n    total += i * i\nprint(total)\n"


def _record(tmp_path: Path, *options: str) -> tuple[subprocess.CompletedProcess, Path]:
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    out = tmp_path / "prog.dcprof"
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", str(out), *options,
                           "--", sys.executable, str(prog)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    return proc, out


def test_gpu_off_says_why_once(tmp_path: Path) -> None:
    proc, out = _record(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(sum(i * i for i in range(200000)))
    tree = load(out)
    gpu_notes = [n for n in tree.metadata["notes"] if "GPU capture" in n]
    if not gpu_notes and tree.metadata.get("gpu", {}).get("library"):
        pytest.skip("GPU capture is on here (a GPU machine)")
    assert len(gpu_notes) == 1, tree.metadata["notes"]
    assert gpu_notes[0].startswith("GPU capture off: ")
    assert "\n" not in gpu_notes[0]
    assert tree.total("gpu.time") == 0
    assert tree.default_metric() == "cpu.time"
    report = subprocess.run([sys.executable, "-m", "deepcontext", "report", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0 and "GPU capture off" in report.stdout


def test_no_gpu_context_no_gpu_note(tmp_path: Path) -> None:
    proc, out = _record(tmp_path, "--context", "python,op")
    assert proc.returncode == 0, proc.stderr
    tree = load(out)
    assert not [n for n in tree.metadata["notes"] if "GPU capture" in n]
    assert "gpu" not in tree.metadata


def test_core_reports_reason_without_driver() -> None:
    from deepcontext.capture.native import core

    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("a GPU driver is present")
    reason = core.gpu_start([])
    assert reason.startswith("GPU capture off: ")
    assert core.gpu_stats()["active"] is False
    core.gpu_flush(0.0)  # harmless when off
    core.gpu_stop(0.0)


def test_cupti_lib_dirs_prefer_newest_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for pkg, lib in (("cuda_cupti", "libcupti.so.12"), ("cu13", "libcupti.so.13")):
        d = tmp_path / "nvidia" / pkg / "lib"
        d.mkdir(parents=True)
        (d / lib).write_bytes(b"")
    (tmp_path / "nvidia" / "cublas" / "lib").mkdir(parents=True)  # no libcupti: not listed
    monkeypatch.setattr(sys, "path", [str(tmp_path), str(tmp_path / "missing")])
    assert gpu.cupti_lib_dirs() == [str(tmp_path / "nvidia" / "cu13" / "lib"),
                                    str(tmp_path / "nvidia" / "cuda_cupti" / "lib")]
