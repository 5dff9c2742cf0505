"""`deepcontext analyze` on real GPU programs (benchmarks/fixes/, 23 steps each, memcpy 103):
the program with the inefficiency gets its rule at the exact line, at warning level or above;
the fixed program gets no warning-level finding at all. benchmarks/fix_gains.py times the same
pairs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

FIXES = Path(__file__).parents[2] / "benchmarks" / "fixes"
#: (program, rule expected on `before`, marker of its line)
CASES = [
    ("fusion", "kernel-fusion", "GELU"),
    ("precision", "fp32-matmul", "MATMUL"),
    ("memcpy", "memcpy", "COPY"),
    ("optimizer", "optimizer-per-parameter", "UPDATE"),
]


#: Warnings the fixed program keeps by design: 400 tiny parameter tensors stay launch-bound after
#: the update loop is fused (stack and backward over 400 tensors), and cpu-latency says so.
STILL_TRUE_AFTER = {"optimizer": {"cpu-latency"}}


def line_of(program: Path, marker: str) -> int:
    return next(i for i, t in enumerate(program.read_text().splitlines(), 1)
                if t.rstrip().endswith(f"# {marker}"))


def recorded(tmp_path: Path, program: Path, variant: str) -> Path:
    out = tmp_path / f"{program.stem}_{variant}.dcprof"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    rec = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", str(out), "--",
                          sys.executable, str(program), variant], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path, env=env)
    assert rec.returncode == 0, rec.stderr[-3000:]
    return out


def analyzed(tmp_path: Path, program: Path, variant: str) -> list[dict]:
    out = recorded(tmp_path, program, variant)
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "analyze", str(out), "--format",
                           "json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)["findings"]


@pytest.mark.parametrize("stem, rule, marker", CASES, ids=[c[0] for c in CASES])
def test_rule_fires_before_the_fix_and_nothing_warns_after(tmp_path, stem, rule, marker):
    program = FIXES / f"{stem}.py"
    before = analyzed(tmp_path, program, "before")
    hits = [f for f in before if f["rule"] == rule]
    assert len(hits) == 1, [(f["rule"], f["severity"], f["title"]) for f in before]
    (f,) = hits
    assert f["severity"] in ("warning", "error"), f
    assert (f["location"]["file"], f["location"]["line"]) == (str(program), line_of(program, marker))
    assert f["estimated_gain"]["seconds"] > 0 and f["suggestion"]
    after = analyzed(tmp_path, program, "after")
    assert [(g["rule"], g["title"]) for g in after if g["severity"] != "note"
            and g["rule"] not in STILL_TRUE_AFTER.get(stem, ())] == []
    assert [g for g in after if g["rule"] == rule] == []


def line_of_text(program: Path, text: str) -> int:
    return next(i for i, t in enumerate(program.read_text().splitlines(), 1) if t.startswith(text))


def test_cuda_setup_is_recorded_as_gpu_init(tmp_path):
    from deepcontext.tree import load

    program = FIXES / "memcpy.py"
    tree = load(recorded(tmp_path, program, "before"))
    init = [(tree.inclusive(n.id, "gpu.init"), n) for n in tree.nodes
            if n.frame.kind == "python" and n.frame.file == str(program)]
    total, first = max(init, key=lambda x: x[0])
    assert total > 0.01, "creating the CUDA context takes tens of milliseconds at least"
    assert first.frame.line < line_of_text(program, "def step")
