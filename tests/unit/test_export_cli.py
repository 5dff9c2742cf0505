"""``deepcontext export``: format from the extension, no silent overwrite, progress, errors."""

from __future__ import annotations

import json

import pytest
from _export_trees import training_tree

from deepcontext.cli import export as export_cli
from deepcontext.cli.main import main, parse_args
from deepcontext.render.exporters import EXPORTERS, ExportOptions, guess_format
from deepcontext.tree.cct import CallingContextTree
from deepcontext.tree.frame import Frame
from deepcontext.tree.profile_file import save


@pytest.fixture
def profile(tmp_path):
    path = tmp_path / "run.dcprof"
    save(training_tree(), path)
    return path


@pytest.mark.parametrize("name,fmt", [
    ("a.speedscope.json", "speedscope"), ("a.pb.gz", "pprof"), ("a.pprof", "pprof"),
    ("a.hatchet.json", "hatchet"), ("a.folded", "folded"), ("A.TXT", "folded"),
    ("a.trace.json", "trace"), ("a.perfetto.json", "trace")])
def test_format_from_extension(name, fmt):
    assert guess_format(name) == fmt


def test_unknown_extension_is_one_line_error(profile, tmp_path, capsys):
    assert main(["export", str(profile), "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("deepcontext: error: cannot tell the format") and err.count("\n") == 1


def test_writes_each_format_and_refuses_overwrite(profile, tmp_path, capsys):
    for exporter in EXPORTERS.values():
        out = tmp_path / f"out{exporter.extensions[0]}"
        assert main(["export", str(profile), "-o", str(out)]) == 0
        assert out.stat().st_size > 0
        before = out.read_bytes()
        assert main(["export", str(profile), "-o", str(out), "--metric", "cpu.time"]) == 2
        assert "already exists" in capsys.readouterr().err
        assert out.read_bytes() == before
        assert main(["export", str(profile), "-o", str(out), "--metric", "cpu.time", "--force"]) == 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_default_output_name_from_format(profile):
    args = parse_args(["export", str(profile), "--format", "pprof"])
    assert export_cli.resolve_output(args) == ("pprof", profile.with_name("run.pb.gz"))
    assert main(["export", str(profile), "--format", "speedscope"]) == 0
    doc = json.loads(profile.with_name("run.speedscope.json").read_text())
    assert doc["profiles"][0]["name"].startswith("gpu.time")


def test_bad_input_is_one_line(tmp_path, capsys):
    junk = tmp_path / "junk.dcprof"
    junk.write_bytes(b"not a profile")
    assert main(["export", str(junk), "-o", str(tmp_path / "o.folded")]) == 2
    assert main(["export", str(tmp_path / "missing.dcprof"), "-o", str(tmp_path / "o.folded")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("deepcontext: error:") for line in err)
    assert not (tmp_path / "o.folded").exists()


def test_unknown_metric_and_unwritable_dir(profile, tmp_path, capsys):
    assert main(["export", str(profile), "-o", str(tmp_path / "o.pb.gz"), "--metric", "x"]) == 2
    assert main(["export", str(profile), "-o", str(tmp_path / "no" / "o.pb.gz")]) == 2
    err = capsys.readouterr().err
    assert "'x' is not in this profile" in err and "does not exist" in err


def wide_tree(n: int) -> CallingContextTree:
    tree = CallingContextTree()
    for i in range(n):
        leaf = tree.add_path([Frame.make("python", f"f{i % 100}", "/w/m.py", i % 100),
                              Frame.make("op", f"op{i}")])
        tree.add_metric(leaf, "cpu.time", 0.001)
    return tree


@pytest.mark.parametrize("fmt", sorted(EXPORTERS))
def test_progress_counts_every_node(fmt):
    tree = wide_tree(3000)
    seen = []
    EXPORTERS[fmt].render(tree, ExportOptions(advance=seen.append))
    assert sum(seen) == len(tree) - 1 or sum(seen) == len(tree)  # hatchet also walks the root


def test_large_export_shows_progress_on_stderr(tmp_path):
    import os
    import subprocess
    import sys

    path = tmp_path / "wide.dcprof"
    save(wide_tree(export_cli.PROGRESS_MIN_NODES), path)
    env = {**os.environ, "FORCE_COLOR": "1"}  # rich draws live progress only on terminals
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "export", str(path), "-o",
                           str(tmp_path / "w.pb.gz")], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert "exporting pprof" in proc.stderr and "wrote" in proc.stderr
    small = tmp_path / "small.dcprof"
    save(training_tree(), small)
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "export", str(small), "-o",
                           str(tmp_path / "s.pb.gz")], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert "exporting" not in proc.stderr


@pytest.mark.parametrize("fmt", sorted(EXPORTERS))
def test_non_finite_values_export_as_zero(fmt):
    tree = training_tree()
    tree.add_metric(2, "cpu.time", float("nan"))
    tree.add_metric(3, "gpu.time", float("inf"))
    data = EXPORTERS[fmt].render(tree, ExportOptions(metric="cpu.time"))
    if fmt != "pprof":
        assert b"NaN" not in data and b"Infinity" not in data
    if fmt in ("speedscope", "hatchet", "trace"):
        json.loads(data)
