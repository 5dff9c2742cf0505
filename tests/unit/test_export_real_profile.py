"""Every exporter on a profile recorded from a real PyTorch program: each output loads in its
consumer and keeps the profile's totals."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap

import pytest

from deepcontext.cli.main import main
from deepcontext.tree.metrics import unit_of
from deepcontext.tree.profile_file import load

PROGRAM = textwrap.dedent("""
    import torch

    def block(x, w):
        return torch.nn.functional.gelu(x @ w) + x

    def main():
        x, w = torch.randn(32, 96), torch.randn(96, 96)
        for _ in range(25):
            x = block(x, w).tanh()
        print(float(x.sum()) == float(x.sum()))

    main()
""")

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    pytest.importorskip("torch")
    work = tmp_path_factory.mktemp("real")
    prog = work / "prog.py"
    prog.write_text(PROGRAM)
    out = work / "prog.dcprof"
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", str(out),
                           "--", sys.executable, str(prog)],
                          check=False, cwd=work, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    tree = load(out)
    assert tree.total("op.count") > 0, "the real run recorded no operators"
    return out, tree


def export(path, tmp_path, ext, *extra):
    out = tmp_path / f"out{ext}"
    assert main(["export", str(path), "-o", str(out), *extra]) == 0
    return out


def test_speedscope_totals(recorded, tmp_path):
    path, tree = recorded
    doc = json.loads(export(path, tmp_path, ".speedscope.json").read_text())
    for prof in doc["profiles"]:
        metric = prof["name"].split(" - ")[0]
        assert sum(prof["weights"]) == pytest.approx(tree.total(metric), rel=1e-9)
    names = {f["name"] for f in doc["shared"]["frames"]}
    assert any(n.startswith("aten::") for n in names) and "block" in names


def test_pprof_totals(recorded, tmp_path):
    pytest.importorskip("google.protobuf")
    from _pprof_schema import profile_class

    path, tree = recorded
    prof = profile_class()()
    prof.ParseFromString(gzip.decompress(export(path, tmp_path, ".pb.gz").read_bytes()))
    for i, st in enumerate(prof.sample_type):
        metric = prof.string_table[st.type]
        scale = 1e9 if unit_of(metric) == "s" else 1
        got = sum(s.value[i] for s in prof.sample)
        assert abs(got - tree.total(metric) * scale) <= len(prof.sample)  # per-sample rounding


def test_hatchet_totals(recorded, tmp_path):
    ht = pytest.importorskip("hatchet")
    path, tree = recorded
    gf = ht.GraphFrame.from_literal(json.loads(export(path, tmp_path, ".hatchet.json").read_text()))
    assert len(gf.dataframe) == len(tree)
    for metric in tree.metric_names():
        assert gf.dataframe[metric].sum() == pytest.approx(tree.total(metric), rel=1e-9)


def test_folded_and_trace_totals(recorded, tmp_path):
    path, tree = recorded
    lines = export(path, tmp_path, ".folded", "--metric", "op.count").read_text().splitlines()
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == tree.total("op.count")
    doc = json.loads(export(path, tmp_path, ".trace.json", "--metric", "op.time").read_text())
    # no thread frames here: top-level contexts follow one another on one track
    end = max(e["ts"] + e["dur"] for e in doc["traceEvents"] if e["ph"] == "X")
    assert end * 1e3 == pytest.approx(tree.total("op.time") * 1e9, abs=len(tree))
