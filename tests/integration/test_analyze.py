"""``deepcontext analyze`` on real recorded programs: each inefficiency fires its rule at the
exact user line; the fixed program has no warning-level finding. Also SARIF, custom rules and
``deepcontext diff`` on two real profiles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from helpers import PROGRAMS, line_of, record

SCHEMA = Path(__file__).parents[1] / "data" / "sarif-schema-2.1.0.json"
OPTIONS = ("--sample-interval", "0.005")

#: (program stem, rule expected on the bad program, marker of its line, lowest severity)
PAIRS = [
    ("fusion", "kernel-fusion", "GELU", "warning"),
    ("sync", "host-sync", "SYNC", "note"),  # a note on CPU: no GPU to wait for here
    ("optimizer", "optimizer-per-parameter", "UPDATE", "warning"),
    ("layout", "layout-copy", "LAYOUT", "warning"),
    ("loop", "cpu-latency", "LOOP", "warning"),
    ("loader", "dataloader-main-process", "LOADER", "warning"),
    ("adam", "optimizer-per-parameter", "STEP", "warning"),
]
RANK = {"note": 0, "warning": 1, "error": 2}


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deepcontext", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd, check=False)


class Profiles:
    """Every analyze_* program recorded once, on first use (a test records only what it reads,
    so no single test holds the recording time of all fourteen)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.paths = tmp, {}

    def __getitem__(self, program: str) -> Path:
        if program not in self.paths:
            proc, path = record(self.tmp, program, options=OPTIONS)
            assert proc.returncode == 0, proc.stderr
            self.paths[program] = path
        return self.paths[program]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    return Profiles(tmp_path_factory.mktemp("analyze"))


def findings(path: Path, *extra: str) -> list[dict]:
    proc = cli("analyze", str(path), "--format", "json", *extra)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "deepcontext.findings/1"
    return doc["findings"]


@pytest.mark.parametrize("stem, rule, marker, severity", PAIRS, ids=[p[0] for p in PAIRS])
def test_bad_program_fires_the_rule_at_the_exact_line(profiles, stem, rule, marker, severity):
    program = f"analyze_{stem}_bad.py"
    hits = [f for f in findings(profiles[program]) if f["rule"] == rule]
    assert len(hits) == 1, [f["rule"] for f in findings(profiles[program])]
    (f,) = hits
    assert f["location"]["file"] == str(PROGRAMS / program)
    assert f["location"]["line"] == line_of(program, marker)
    assert RANK[f["severity"]] >= RANK[severity]
    assert f["suggestion"] and f["evidence"] and f["path"]
    assert f["estimated_gain"]["seconds"] > 0 and 0 < f["estimated_gain"]["fraction"] <= 1


@pytest.mark.parametrize("stem", [p[0] for p in PAIRS])
def test_fixed_program_has_no_warning(profiles, stem):
    program = f"analyze_{stem}_good.py"
    got = findings(profiles[program])
    assert [f for f in got if f["severity"] != "note"] == []
    rule = next(p[1] for p in PAIRS if p[0] == stem)
    assert [f for f in got if f["rule"] == rule] == []
    assert findings(profiles[program], "--min-severity", "warning") == []


def test_specific_evidence_on_real_profiles(profiles):
    (fusion,) = [f for f in findings(profiles["analyze_fusion_bad.py"])
                 if f["rule"] == "kernel-fusion"]
    assert fusion["evidence"]["ops_per_call"] == 9.0  # 6 mul + 2 add + 1 tanh per gelu() call
    assert fusion["evidence"]["op_calls"] == 2700  # 300 steps
    assert "approximate='tanh'" in fusion["suggestion"]
    (opt,) = [f for f in findings(profiles["analyze_optimizer_bad.py"])
              if f["rule"] == "optimizer-per-parameter"]
    # 12 layers x (weight, bias) x 150 steps x (mul_, add_, add_, sub_)
    assert opt["evidence"]["update_calls"] == 24 * 150 * 4
    assert opt["evidence"]["updates_per_gradient"] == 4.0
    (sync,) = [f for f in findings(profiles["analyze_sync_bad.py"]) if f["rule"] == "host-sync"]
    assert sync["evidence"]["calls"] == 400
    (layout,) = [f for f in findings(profiles["analyze_layout_bad.py"])
                 if f["rule"] == "layout-copy"]
    assert layout["evidence"]["copies"] == 600 and layout["evidence"]["views"] == "transpose"


def test_sarif_of_a_real_profile_validates(profiles, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    out = tmp_path / "fusion.sarif"
    proc = cli("analyze", str(profiles["analyze_fusion_bad.py"]), "--format", "sarif", "-o",
               str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()),
                        format_checker=jsonschema.FormatChecker())
    result = next(r for r in doc["runs"][0]["results"] if r["ruleId"] == "kernel-fusion")
    region = result["locations"][0]["physicalLocation"]["region"]
    assert region["startLine"] == line_of("analyze_fusion_bad.py", "GELU")


def test_text_output_and_custom_rules_file(profiles, tmp_path):
    rules = tmp_path / "my_rules.py"
    rules.write_text(
        "from deepcontext.analysis import Rule, Threshold\n"
        "class BmmCount(Rule):\n"
        "    id, category, description = 'bmm-count', 'hotspot', 'counts bmm calls per line'\n"
        "    thresholds = {'min_calls': Threshold(100, 'example')}\n"
        "    def check(self, ctx):\n"
        "        for s in ctx.op_sites:\n"
        "            if s.name == 'aten::bmm' and ctx.count(s.node) >= self.t('min_calls'):\n"
        "                yield ctx.finding(self, s.node, severity='note', title='bmm',\n"
        "                    message='many bmm', evidence={'calls': ctx.count(s.node)},\n"
        "                    suggestion='batch', gain_seconds=0.0, method='none')\n")
    proc = cli("analyze", str(profiles["analyze_layout_good.py"]), "--rules", str(rules))
    assert proc.returncode == 0, proc.stderr
    assert "[bmm-count] analyze_layout_good.py:7 in scores" in proc.stdout
    bad = cli("analyze", str(profiles["analyze_layout_good.py"]), "--rules",
              str(tmp_path / "nope.py"))
    assert bad.returncode == 2 and bad.stderr.startswith("deepcontext: error: --rules")
    assert "Traceback" not in bad.stderr


def test_diff_of_two_real_profiles_proves_the_fusion_fix(profiles):
    bad, good = profiles["analyze_fusion_bad.py"], profiles["analyze_fusion_good.py"]
    proc = cli("diff", str(bad), str(good), "--metric", "op.count", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    gelu = next(c for c in doc["contexts"] if c["frames"][-1][1] == "gelu")
    line = line_of("analyze_fusion_bad.py", "GELU")
    assert gelu["frames"][-1] == ["<main>", "gelu", line]
    assert gelu["ops"]["aten::mul"] == {"before": 1800, "after": 0}
    assert gelu["ops"]["aten::gelu"] == {"before": 0, "after": 300}
    assert gelu["before"]["op.time"] > gelu["after"]["op.time"]
    assert doc["speedup"] > 1.3  # op.count: the fused version dispatches far fewer ops
    text = cli("diff", str(bad), str(good), "--metric", "op.count")
    assert text.returncode == 0 and "aten::mul 1800->0" in text.stdout
