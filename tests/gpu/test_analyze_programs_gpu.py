"""The analyzer's real-program suite on the GPU (tests/analyzer_programs/, run with
DEEPCONTEXT_SUITE_DEVICE=cuda): GPT-2's gelu_new chain is found in transformers and reported at
the user's line with the config lever, gone after the fix; a model built, moved to the GPU and
compiled gets no finding on those set-up lines (never launch-bound, never pin_memory), and its
compiled, GPU-bound step is not launch-bound either."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

PROGRAMS = Path(__file__).parents[1] / "analyzer_programs"
RANK = {"note": 0, "warning": 1, "error": 2}


def lines_of(program: str, marker: str) -> list[int]:
    return [i for i, t in enumerate((PROGRAMS / f"{program}.py").read_text().splitlines(), 1)
            if f"# {marker}" in t]


def analyzed(tmp_path: Path, program: str, variant: str = "before") -> list[dict]:
    pytest.importorskip("torch")
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    out = tmp_path / f"{program}_{variant}.dcprof"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DEEPCONTEXT_SUITE_DEVICE": "cuda"}
    rec = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", str(out), "--",
                          sys.executable, str(PROGRAMS / f"{program}.py"), variant],
                         capture_output=True, text=True, timeout=500, cwd=tmp_path, env=env)
    assert rec.returncode == 0, rec.stderr[-3000:]
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "analyze", str(out), "--format",
                           "json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)["findings"]


def test_gpt2_gelu_new_chain_is_found_in_transformers_and_fixed_by_the_config(tmp_path):
    pytest.importorskip("transformers")
    before = analyzed(tmp_path, "gpt2_train")
    fusion = [f for f in before if f["rule"] == "kernel-fusion" and RANK[f["severity"]] >= 1]
    assert len(fusion) == 1, [(f["rule"], f["severity"], f["title"]) for f in before]
    (f,) = fusion
    assert f["location"]["line"] == lines_of("gpt2_train", "FORWARD")[0]
    assert f["origin"]["function"] == "NewGELUActivation.forward"
    assert "activation_function='gelu_pytorch_tanh'" in f["suggestion"]
    assert f["evidence"]["gpu_launches"] > 0
    setup = set(lines_of("gpt2_train", "SETUP"))
    assert [g for g in before if g["location"] and g["location"]["line"] in setup
            and g["rule"] != "hotspot"] == []
    after = analyzed(tmp_path, "gpt2_train", "after")
    assert [g["rule"] for g in after if g["rule"] == "kernel-fusion"
            and RANK[g["severity"]] >= 1] == []


def test_building_moving_and_compiling_a_model_are_set_up(tmp_path):
    found = analyzed(tmp_path, "gpu_setup")
    setup = set(lines_of("gpu_setup", "SETUP"))
    on_setup = [(f["rule"], f["severity"], f["title"]) for f in found
                if f["location"] and f["location"]["line"] in setup and f["rule"] != "hotspot"]
    assert on_setup == []  # no launch-bound, no pin_memory, no compile time as host time
    step = lines_of("gpu_setup", "STEP")[0]
    assert [f["title"] for f in found if f["rule"] == "cpu-latency"
            and f["location"]["line"] == step and RANK[f["severity"]] >= 1] == []
