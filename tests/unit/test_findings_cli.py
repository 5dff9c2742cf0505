"""``deepcontext analyze`` command line on saved literal trees."""

import json

from deepcontext.analysis.testing import build, op, user
from deepcontext.cli.main import main, parse_args
from deepcontext.tree.profile_file import save


def profile(tmp_path):
    tree = build([([user(10), user(4, "gelu"), op(n)], {"op.count": c, "op.time": 0.05})
                  for n, c in (("aten::mul", 600), ("aten::add", 200), ("aten::tanh", 100))]
                 + [([user(30), op("aten::addmm")], {"op.time": 0.5, "op.count": 100})],
                 metadata={"complete": True, "command": ["python", "train.py"]})
    path = tmp_path / "p.dcprof"
    save(tree, path)
    return path


def test_parsing_defaults_and_choices():
    args = parse_args(["analyze", "x.dcprof"])
    assert (args.format, args.min_severity, args.rules, args.output) == ("text", "note", [], None)
    args = parse_args(["analyze", "x.dcprof", "--format", "sarif", "--rules", "a.py", "--rules",
                       "b.py", "--min-severity", "error", "-o", "out.sarif"])
    assert args.rules == ["a.py", "b.py"] and args.output == "out.sarif"


def test_json_to_stdout_and_min_severity(tmp_path, capsys):
    path = profile(tmp_path)
    assert main(["analyze", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rules = [f["rule"] for f in doc["findings"]]
    assert rules[0] == "kernel-fusion" and "hotspot" in rules
    assert main(["analyze", str(path), "--format", "json", "--min-severity", "warning"]) == 0
    assert [f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["kernel-fusion"]


def test_output_file_and_text(tmp_path, capsys):
    path, out = profile(tmp_path), tmp_path / "findings.txt"
    assert main(["analyze", str(path), "-o", str(out)]) == 0
    assert "findings written to" in capsys.readouterr().err
    assert "[kernel-fusion] train.py:4 in gelu" in out.read_text()


def test_list_rules_shows_thresholds(capsys):
    assert main(["analyze", "--list-rules"]) == 0
    out = capsys.readouterr().out
    assert "kernel-fusion  [kernel_fusion]" in out and "min_ops_per_call = 4" in out


def test_errors_are_one_line(tmp_path, capsys, monkeypatch):
    assert main(["analyze", str(tmp_path / "missing.dcprof")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    monkeypatch.chdir(tmp_path)
    assert main(["analyze"]) == 2
    assert capsys.readouterr().err == (
        "deepcontext: error: no profile named and no .dcprof file in this directory; record "
        "one with: deepcontext record -- python train.py\n")
    saved = profile(tmp_path)
    assert main(["analyze", str(saved), "-o", str(tmp_path / "no" / "x")]) == 2
    assert "does not exist" in capsys.readouterr().err
    clash = tmp_path / "clash.py"
    clash.write_text("from deepcontext.analysis.rules.hotspot import HotspotRule\n"
                     "RULES = [HotspotRule]\n")
    assert main(["analyze", str(saved), "--rules", str(clash)]) == 2
    assert "already defined" in capsys.readouterr().err
