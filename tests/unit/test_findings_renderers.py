"""Renderers of findings: text, JSON (deepcontext.findings/1) and SARIF 2.1.0 (official schema)."""

import json
from pathlib import Path

import jsonschema
import pytest

from deepcontext.analysis import analyze, builtin_rules
from deepcontext.analysis.testing import build, op, user
from deepcontext.render.findings import FindingsReport, render, renderers

SCHEMA = json.loads((Path(__file__).parents[1] / "data" / "sarif-schema-2.1.0.json").read_text())


def report(findings_tree=None):
    tree = findings_tree or build([
        ([user(10, "main", "/home/u/my proj/train.py"), user(4, "gelu", "/home/u/my proj/train.py"),
          op(n)], {"op.count": c, "op.time": 0.05}) for n, c in
        (("aten::mul", 600), ("aten::add", 200), ("aten::tanh", 100))] + [
        ([user(3, "<module>", "<string>"), op("aten::item")], {"op.count": 500, "op.time": 0.01}),
        ([user(30, "main", "/home/u/my proj/train.py"), op("aten::addmm")], {"op.time": 0.5}),
    ])
    rules = builtin_rules()
    return FindingsReport(findings=analyze(tree, rules=rules), profile="x.dcprof", rules=rules,
                          profiled_time=0.66, wall_time=2.0, metadata={"command": ["python", "t"]})


def test_registry_names_and_extensions():
    assert {n: r.extension for n, r in renderers().items()} == {
        "text": ".txt", "json": ".json", "sarif": ".sarif"}


def test_json_document_counts_and_findings():
    rep = report()
    doc = json.loads(render(rep, "json"))
    assert doc["schema"] == "deepcontext.findings/1"
    assert doc["counts"]["warning"] + doc["counts"]["error"] >= 1
    assert doc["findings"] == [f.to_dict() for f in rep.findings]
    assert doc["findings"][0]["rule"] == "kernel-fusion"


def test_sarif_validates_against_the_official_schema():
    doc = json.loads(render(report(), "sarif"))
    jsonschema.validate(doc, SCHEMA, format_checker=jsonschema.FormatChecker())
    run = doc["runs"][0]
    ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    fusion = next(r for r in run["results"] if r["ruleId"] == "kernel-fusion")
    assert ids[fusion["ruleIndex"]] == "kernel-fusion"
    phys = fusion["locations"][0]["physicalLocation"]
    assert phys["artifactLocation"]["uri"] == "file:///home/u/my%20proj/train.py"
    assert phys["region"]["startLine"] == 4
    assert fusion["level"] in ("warning", "error")
    # a finding in `python -c` code has a logical location only
    item = next(r for r in run["results"] if r["ruleId"] == "host-sync")
    assert "physicalLocation" not in item["locations"][0]


def test_sarif_with_no_findings_is_valid():
    rep = report(build([([user(1), op("aten::add")], {"op.time": 1.0, "op.count": 1})]))
    rep.findings = []
    jsonschema.validate(json.loads(render(rep, "sarif")), SCHEMA)


def test_text_names_line_why_fix_and_gain_and_neutralizes_escapes():
    rep = report()
    out = render(rep, "text")
    assert "train.py:4 in gelu" in out and "fix:" in out and "gain: ~" in out
    rep.findings[0].title = "evil \x1b[31m title"
    assert "\x1b" not in render(rep, "text")


@pytest.mark.parametrize("fmt", ["text", "json", "sarif"])
def test_every_format_renders_an_empty_report(fmt):
    rep = report()
    rep.findings = []
    assert render(rep, fmt)


def test_text_puts_the_profiles_path_into_the_hotspots_command():
    rep = report()
    (hot,) = [f for f in rep.findings if f.rule == "hotspot" and f.location.line == 30]
    assert "`deepcontext report PROFILE --include 'train\\.py:30\\)'`" in hot.suggestion  # JSON
    rep.profile = "runs/my run.dcprof"
    out = " ".join(render(rep, "text").split())  # (unwrapped)
    assert "`deepcontext report 'runs/my run.dcprof' --include 'train\\.py:30\\)'`" in out
    assert "report PROFILE" not in out
