"""Per-rank values in the profile file: merge keeps them, readers keep working on version 1
files, damaged per-rank records are one-line errors."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from deepcontext.cli.main import main
from deepcontext.errors import ProfileFormatError
from deepcontext.tree import CallingContextTree, Frame, load, save
from deepcontext.tree.merge import merge_profiles

STEP = Frame.make("python", "step", "/app/train.py", 4)
MM = Frame.make("op", "aten::mm")
WAIT = Frame.make("op", "c10d::allreduce_")


def rank_profile(path, rank, mm, wait, **meta):
    t = CallingContextTree({"complete": True, "rank": rank, "world_size": 2, **meta})
    t.add_metric(t.add_path([STEP, MM]), "cpu.time", mm)
    t.add_metric(t.add_path([STEP, WAIT]), "op.time", wait)
    save(t, path)
    return path


def test_merge_keeps_each_ranks_values_and_their_sum(tmp_path, capsys):
    a = rank_profile(tmp_path / "job.rank0.dcprof", 0, 1.0, 0.5)
    b = rank_profile(tmp_path / "job.rank1.dcprof", 1, 1.5, 0.0)
    assert main(["merge", str(b), str(a), "-o", str(tmp_path / "job.dcprof")]) == 0
    assert "per-rank values of ranks 0-1 kept" in capsys.readouterr().out
    m = load(tmp_path / "job.dcprof")
    m.self_check()
    mm, wait = m.add_path([STEP, MM]), m.add_path([STEP, WAIT])
    assert m.ranks() == [0, 1]
    assert m.exclusive(mm, "cpu.time") == 2.5
    assert (m.rank_exclusive(mm, "cpu.time", 0), m.rank_exclusive(mm, "cpu.time", 1)) == (1.0, 1.5)
    assert m.rank_exclusive(wait, "op.time", 1) == 0.0
    step = m.add_path([STEP])
    assert m.rank_inclusive_all("cpu.time", 1)[step] == 1.5
    assert m.rank_view(0).inclusive(step, "op.time") == 0.5
    assert [e["rank"] for e in m.metadata["ranks"]] == [0, 1]
    # merging merged jobs of distinct ranks (two nodes) keeps them all
    c = rank_profile(tmp_path / "n2.rank2.dcprof", 2, 3.0, 0.1)
    both = merge_profiles([m, load(c)], ["job.dcprof", "n2.rank2.dcprof"])
    assert both.ranks() == [0, 1, 2]
    assert both.rank_exclusive(both.add_path([STEP, MM]), "cpu.time", 2) == 3.0


def test_profiles_that_are_not_distinct_ranks_keep_only_sums(tmp_path):
    a = rank_profile(tmp_path / "a.dcprof", 0, 1.0, 0.5)
    b = rank_profile(tmp_path / "b.dcprof", 0, 2.0, 0.5)
    m = merge_profiles([load(a), load(b)], ["a", "b"])
    assert m.ranks() == []
    assert m.exclusive(m.add_path([STEP, MM]), "cpu.time") == 3.0
    assert any("per-rank values were dropped" in n for n in m.metadata["notes"])


def test_version_1_file_reads_as_a_profile_without_ranks(tmp_path):
    p = rank_profile(tmp_path / "old.dcprof", 0, 1.0, 0.5)
    db = sqlite3.connect(p)
    db.execute("DROP TABLE rank_metrics")
    db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    t = load(p)
    assert t.ranks() == [] and t.total("cpu.time") == 1.0
    assert t.metadata["rank"] == 0


@pytest.mark.parametrize("row", ["(1, 'x', 'cpu.time', 1.0)", "(99, 0, 'cpu.time', 1.0)",
                                 "(1, -3, 'cpu.time', 1.0)", "(1, 0, 'cpu.time', 'abc')"])
def test_damaged_per_rank_records_are_one_line_errors(tmp_path, row):
    a = rank_profile(tmp_path / "r0.dcprof", 0, 1.0, 0.5)
    b = rank_profile(tmp_path / "r1.dcprof", 1, 1.0, 0.5)
    out = tmp_path / "m.dcprof"
    save(merge_profiles([load(a), load(b)], ["r0", "r1"]), out)
    db = sqlite3.connect(out)
    db.execute(f"INSERT INTO rank_metrics VALUES {row}")
    db.commit()
    db.close()
    with pytest.raises(ProfileFormatError, match="corrupt per-rank metric record"):
        load(out)
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "report", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("deepcontext: error:")


def test_hostile_rank_metadata_does_not_break_the_merge():
    a = CallingContextTree({"ranks": [{"rank": "x"}, 5, {"rank": 3}], "world_size": [1]})
    a.add_rank_metric(3, a.add_path([MM]), "op.time", 1.0)
    b = CallingContextTree({"rank": 1, "world_size": {"a": 1}})
    b.add_metric(b.add_path([MM]), "op.time", 2.0)
    m = merge_profiles([a, b], ["a", "b"])
    assert m.ranks() == [1, 3] and "world_size" not in m.metadata
    assert [e["rank"] for e in m.metadata["ranks"] if isinstance(e, dict)] == ["x", 1, 3]


def _cli(*args, cwd):
    proc = subprocess.run([sys.executable, "-m", "deepcontext", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _job(tmp_path, name, mm, wait):
    """A merged job of two ranks: (mm, wait) seconds per rank."""
    files = [rank_profile(tmp_path / f"{name}.rank{r}.dcprof", r, mm[r], wait[r]) for r in (0, 1)]
    out = tmp_path / f"{name}.dcprof"
    save(merge_profiles([load(f) for f in files], [f.name for f in files]), out)
    return out


def test_report_shows_each_ranks_own_value_beside_the_sum(tmp_path):
    job = _job(tmp_path, "job", (1.0, 1.5), (0.5, 0.0))
    text = _cli("report", str(job), "--metric", "cpu.time", "--all-frames", cwd=tmp_path)
    lines = text.splitlines()
    assert "top-down  total cpu.time = 2.5s  (r0 1s | r1 1.5s)" in lines
    (mm,) = [line for line in lines if "aten::mm" in line]
    assert mm.endswith("[op] aten::mm  r0 1s | r1 1.5s")
    assert "each rank's own after the line (rN)" in text
    # JSON: every node carries each rank's inclusive values; the views keep them
    doc = json.loads(_cli("report", str(job), "--format", "json", "--all-frames", cwd=tmp_path))
    (step,) = doc["tree"]["children"]
    assert step["rank_inclusive"] == {"0": {"cpu.time": 1.0, "op.time": 0.5},
                                      "1": {"cpu.time": 1.5}}
    assert step["inclusive"] == {"cpu.time": 2.5, "op.time": 0.5}
    inverted = json.loads(_cli("report", str(job), "--format", "json", "--inverted",
                               "--metric", "op.time", cwd=tmp_path))
    (wait,) = [c for c in inverted["tree"]["children"] if c["frame"]["name"] == "c10d::allreduce_"]
    assert wait["rank_inclusive"] == {"0": {"op.time": 0.5}, "1": {}}
    # one rank alone has no per-rank values to show
    one = _cli("report", str(job), "--rank", "1", "--metric", "cpu.time", "--all-frames",
               cwd=tmp_path)
    assert "top-down  total cpu.time = 1.5s" in one.splitlines() and " r1 " not in one


def test_diff_of_merged_jobs_shows_each_ranks_change(tmp_path):
    before = _job(tmp_path, "before", (1.0, 2.0), (1.0, 0.0))
    after = _job(tmp_path, "after", (1.5, 1.0), (0.0, 0.0))
    text = _cli("diff", str(before), str(after), "--metric", "op.time", cwd=tmp_path)
    lines = text.splitlines()
    (row,) = [i for i, line in enumerate(lines) if "(-1s)" in line]
    assert lines[row + 1] == "      ranks: r0 1s->0s, r1 0s->0s"
    doc = json.loads(_cli("diff", str(before), str(after), "--metric", "cpu.time",
                          "--format", "json", cwd=tmp_path))
    (ctx,) = doc["contexts"]
    assert ctx["delta"]["cpu.time"] == -0.5
    assert {k: (v["before"].get("cpu.time"), v["after"].get("cpu.time"))
            for k, v in ctx["ranks"].items()} == {"0": (1.0, 1.5), "1": (2.0, 1.0)}
    # one rank against another of the same job: plain profiles, no per-rank lines
    text = _cli("diff", str(before), str(before), "--rank-before", "0", "--rank-after", "1",
                "--metric", "cpu.time", cwd=tmp_path)
    assert "ranks:" not in text and "1s ->        2s  (+1s)" in text
