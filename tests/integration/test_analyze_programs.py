"""The analyzer on real programs (tests/analyzer_programs/): third-party models built from
configs (Hugging Face GPT-2, Llama, BERT, ViT, generate; a torch-geometric GCN) and programs
written the way people write them. Every finding at warning or above is the expected true
positive at the exact line (its fix is measured by benchmarks/fix_gains.py --programs); the
fixed and the well-written programs get nothing at warning or above; set-up lines get no
finding at all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("torch_geometric")

PROGRAMS = Path(__file__).parents[1] / "analyzer_programs"
sys.path.insert(0, str(PROGRAMS))
from _suite import SUITE  # noqa: E402

RANK = {"note": 0, "warning": 1, "error": 2}
FIXED = [name for name, expected in SUITE.items() if expected]


def line_of(program: str, marker: str) -> int:
    for i, text in enumerate((PROGRAMS / f"{program}.py").read_text().splitlines(), 1):
        if f"# {marker}" in text:
            return i
    raise AssertionError(f"no marker {marker} in {program}")


def record(tmp: Path, program: str, variant: str) -> Path:
    out = tmp / f"{program}_{variant}.dcprof"
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", str(out), "--",
                           sys.executable, str(PROGRAMS / f"{program}.py"), variant],
                          capture_output=True, text=True, timeout=600, cwd=tmp, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == "done"  # the program's own output passes through
    return out


class Profiles:
    """Each program recorded once, on first use: one test records at most the two variants it
    reads, so no single test holds the whole suite's recording time."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.paths = tmp, {}

    def __getitem__(self, key: tuple[str, str]) -> Path:
        if key not in self.paths:
            self.paths[key] = record(self.tmp, *key)
        return self.paths[key]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    return Profiles(tmp_path_factory.mktemp("programs"))


def findings(path: Path) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "analyze", str(path),
                           "--format", "json"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["findings"]


def warnings(found: list[dict]) -> list[dict]:
    return [f for f in found if RANK[f["severity"]] >= 1]


@pytest.mark.parametrize("name", FIXED)
def test_the_one_warning_is_the_expected_finding_at_the_exact_line(profiles, name):
    rule, marker, origin = SUITE[name]
    got = warnings(findings(profiles[name, "before"]))
    assert [f["rule"] for f in got] == [rule], [(f["rule"], f["title"]) for f in got]
    (f,) = got
    assert f["location"]["file"] == str(PROGRAMS / f"{name}.py")
    assert f["location"]["line"] == line_of(name, marker)
    if origin is None:
        assert f["origin"] is None
    else:
        assert f["origin"]["file"].replace("\\", "/").endswith(origin)
        assert origin in f["message"] and origin in f["suggestion"]  # where the chain lives
    assert f["estimated_gain"]["fraction"] >= 0.05


@pytest.mark.parametrize("name, variant", [(n, "after") for n in FIXED]
                         + [(n, "before") for n, e in SUITE.items() if not e])
def test_fixed_and_well_written_programs_get_nothing_at_warning(profiles, name, variant):
    assert [(f["rule"], f["title"]) for f in warnings(findings(profiles[name, variant]))] == []


@pytest.mark.parametrize("name", list(SUITE))
def test_set_up_lines_and_generated_code_get_no_finding(profiles, name):
    text = (PROGRAMS / f"{name}.py").read_text().splitlines()
    setup = {i for i, t in enumerate(text, 1) if "# SETUP" in t}
    for variant in ("before", "after") if SUITE[name] else ("before",):
        for f in findings(profiles[name, variant]):
            loc = f["location"]
            assert loc is None or loc["line"] not in setup or not loc["file"].endswith(
                f"{name}.py"), f
            # torch-geometric's rendered templates in the temp directory are not your code
            assert loc is None or Path(loc["file"]).parent == PROGRAMS, loc


def test_library_chain_names_the_lever(profiles):
    (f,) = warnings(findings(profiles["gpt2_train", "before"]))
    assert f["evidence"]["ops_per_call"] == 8.0  # gelu_new: 4 mul, 2 add, pow, tanh
    assert f["evidence"]["library_function"].startswith("transformers/activations.py:")
    assert f["origin"]["function"] == "NewGELUActivation.forward"
    assert "activation_function='gelu_pytorch_tanh'" in f["suggestion"]
    assert "<module>" not in f["suggestion"] and "<locals>" not in f["suggestion"]
    # Llama's hand-written RMS norm: a note (its swap measured no gain on the CPU), where it is
    (norm,) = [g for g in findings(profiles["llama_train", "before"])
               if g["origin"] and g["origin"]["function"] == "LlamaRMSNorm.forward"]
    assert norm["severity"] == "note" and norm["rule"] == "kernel-fusion"
    assert norm["origin"]["file"].endswith("transformers/models/llama/modeling_llama.py")
    assert "torch.nn.RMSNorm" in norm["suggestion"]


def test_per_row_loop_is_told_to_vectorize(profiles):
    (f,) = warnings(findings(profiles["per_sample_loss", "before"]))
    assert f["evidence"]["iterations_per_call"] == 256.0  # the batch's rows
    assert f["evidence"]["body_runs"] == 256 * 48  # 48 steps (per_sample_loss.py)
    assert "vectorize over that dimension" in f["suggestion"]
    fusion = [g for g in findings(profiles["per_sample_loss", "before"])
              if g["rule"] == "kernel-fusion"]
    assert fusion == []  # the loop's chain is the loop's: vectorizing comes first


def test_hand_written_silu_is_told_silu_not_softmax(profiles):
    (f,) = warnings(findings(profiles["silu_mlp", "before"]))
    assert "torch.nn.functional.silu(x)" in f["suggestion"]
    assert "softmax" not in f["suggestion"]
    assert f["evidence"]["ops_per_call"] == 4.0  # neg, exp, add, div
