"""``deepcontext report`` on literal profiles: options and the JSON schema."""

import json

import pytest

from deepcontext.cli.main import main
from deepcontext.tree import CallingContextTree, Frame, save

MAIN = Frame.make("python", "main", "/app/train.py", 10)
STEP = Frame.make("python", "step", "/app/train.py", 4)
LOAD = Frame.make("python", "load", "/app/data.py", 7)
MM = Frame.make("op", "aten::mm")
RELU = Frame.make("op", "aten::relu")


@pytest.fixture
def profile(tmp_path):
    t = CallingContextTree({"command": ["python", "train.py"], "complete": True})
    t.add_metric(t.add_path([MAIN, STEP, MM]), "cpu.time", 6.0)
    t.add_metric(t.add_path([MAIN, STEP, RELU]), "cpu.time", 1.0)
    t.add_metric(t.add_path([MAIN, LOAD]), "cpu.time", 3.0)
    t.add_metric(t.add_path([MAIN, STEP, MM]), "op.count", 4)
    path = tmp_path / "p.dcprof"
    save(t, path)
    return path


def report_json(capsys, *argv):
    assert main(["report", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_schema_top_down(capsys, profile):
    doc = report_json(capsys, str(profile))
    assert doc["schema"] == "deepcontext.report/1"
    assert doc["metric"] == "cpu.time"
    assert doc["totals"] == {"cpu.time": 10.0, "op.count": 4.0}
    assert doc["units"]["cpu.time"] == "s"
    (main_node,) = doc["tree"]["children"]
    assert main_node["frame"] == {"kind": "python", "name": "main", "file": "/app/train.py", "line": 10}
    assert main_node["inclusive"]["cpu.time"] == 10.0
    step, load = main_node["children"]  # ordered by the metric, hottest first
    assert step["frame"]["name"] == "step" and load["frame"]["name"] == "load"
    mm = step["children"][0]
    assert mm["frame"] == {"kind": "op", "name": "aten::mm"}
    assert mm["metrics"] == {"cpu.time": 6.0, "op.count": 4.0}
    assert mm["children"] == []


def test_inverted_puts_hot_leaves_first(capsys, profile):
    doc = report_json(capsys, str(profile), "--inverted")
    assert doc["view"] == "inverted"
    tops = [(c["frame"]["name"], c["inclusive"]["cpu.time"]) for c in doc["tree"]["children"]]
    assert tops == [("aten::mm", 6.0), ("load", 3.0), ("aten::relu", 1.0)]
    assert doc["tree"]["children"][0]["children"][0]["frame"]["name"] == "step"


def test_flat_totals(capsys, profile):
    doc = report_json(capsys, str(profile), "--flat")
    rows = {r["frame"]["name"]: r for r in doc["rows"]}
    assert rows["main"]["inclusive"]["cpu.time"] == 10.0
    assert rows["main"]["exclusive"]["cpu.time"] == 0.0
    assert rows["aten::mm"]["exclusive"]["cpu.time"] == 6.0


def test_depth_threshold_include_exclude(capsys, profile):
    doc = report_json(capsys, str(profile), "--depth", "2")
    assert all(c["children"] == [] for c in doc["tree"]["children"][0]["children"])
    doc = report_json(capsys, str(profile), "--threshold", "0.2")
    names = [c["frame"]["name"] for c in doc["tree"]["children"][0]["children"][0]["children"]]
    assert names == ["aten::mm"]
    doc = report_json(capsys, str(profile), "--include", "data\\.py")
    assert [c["frame"]["name"] for c in doc["tree"]["children"][0]["children"]] == ["load"]
    doc = report_json(capsys, str(profile), "--exclude", "^step$")
    assert [c["frame"]["name"] for c in doc["tree"]["children"][0]["children"]] == ["load"]


def test_text_report_shows_lines_and_shares(capsys, profile):
    assert main(["report", str(profile)]) == 0
    out = capsys.readouterr().out
    assert "total cpu.time = 10s" in out
    assert "60.0%" in out and "aten::mm" in out and "train.py:4" in out


@pytest.mark.parametrize("argv, message", [
    (["--metric", "gpu.time"], "metric 'gpu.time' is not in this profile (it has: cpu.time, op.count)"),
    (["--depth", "0"], "--depth must be at least 1"),
    (["--include", "("], "--include: invalid regular expression"),
    (["--threshold", "2"], "--threshold is a fraction"),
])
def test_bad_options(capsys, profile, argv, message):
    assert main(["report", str(profile), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("deepcontext: error: ") and message in err and err.count("\n") == 1
