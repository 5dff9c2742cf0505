"""The memory layer on a real GPU (docs/memory.md): a training step's peak as the sum of the
per-context peaks agrees with torch.cuda.max_memory_allocated(); the caching allocator's
cudaMalloc/cudaFree, retry and OOM land on the lines that caused them and agree with torch's
own counters; the analyzer names the optimizer state and the allocator findings.

Run on a GPU machine: python3 -m pytest -q -m gpu tests/gpu/test_memory_gpu.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deepcontext.tree import CallingContextTree, load

pytestmark = pytest.mark.gpu

PROGRAMS = Path(__file__).parent / "programs"
PROGRAM = "memory_train.py"
PARAM_BYTES = 4 * (1024 * 4096 + 4096 + 4096 * 1024 + 1024)


def line_of(marker: str) -> int:
    for i, text in enumerate((PROGRAMS / PROGRAM).read_text().splitlines(), 1):
        if f"# {marker}" in text:
            return i
    raise AssertionError(marker)


def _record(tmp: Path, mode: str) -> tuple[CallingContextTree, dict, Path]:
    out, stats = tmp / f"{mode}.dcprof", tmp / f"{mode}.json"
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "--context",
                           "python,op,gpu,memory", "-o", str(out), "--", sys.executable,
                           str(PROGRAMS / PROGRAM), mode, str(stats)],
                          capture_output=True, text=True, cwd=tmp, timeout=600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "memory_train done\n"
    tree = load(out)
    tree.self_check()
    return tree, json.loads(stats.read_text()), out


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    return _record(tmp_path_factory.mktemp("mem_train"), "train")


@pytest.fixture(scope="module")
def alloc(tmp_path_factory):
    return _record(tmp_path_factory.mktemp("mem_alloc"), "allocator")


def line_total(tree: CallingContextTree, marker: str, metric: str) -> float:
    line = line_of(marker)
    nodes = [n.id for n in tree.nodes if n.frame.kind == "python" and n.frame.line == line
             and n.frame.file.endswith(PROGRAM)]
    assert nodes, marker
    return sum(tree.inclusive_all(metric)[n] for n in nodes
               if not any(a in nodes for a in tree.path_ids(n)[:-1]))


def untracked(tree: CallingContextTree, metric: str) -> float:
    return sum(n.metrics.get(metric, 0.0) for n in tree.nodes
               if n.frame.kind == "marker" and n.frame.name.startswith("untracked memory"))


def test_training_peak_agrees_with_torch(train):
    tree, stats, _ = train
    total = tree.total("mem.cuda0.peak.bytes")
    assert abs(total - stats["max_allocated"]) <= 0.01 * stats["max_allocated"], (total, stats)
    assert untracked(tree, "mem.cuda0.peak.bytes") <= 0.01 * total
    assert "cuda0" in tree.metadata["memory"]["devices"]


def test_parameters_and_optimizer_state_hold_the_peak_at_their_lines(train):
    tree, _, _ = train
    assert line_total(tree, "PARAMS", "mem.cuda0.peak.bytes") == PARAM_BYTES
    assert line_total(tree, "STEP", "mem.cuda0.peak.bytes") >= 2 * PARAM_BYTES  # Adam's moments
    # backward allocations (on autograd's device thread) land under the forward line
    fwd = line_of("FORWARD")
    backward = [n for n in tree.nodes if n.frame.kind == "marker" and n.frame.name == "backward"
                and any(f.kind == "python" and f.line == fwd for f in tree.path(n.id))]
    assert backward and sum(tree.inclusive_all("mem.alloc.count")[n.id] for n in backward) > 0


def test_allocator_segments_agree_with_torch(train, alloc):
    for tree, stats, _ in (train, alloc):
        assert tree.total("mem.segment.alloc.count") == stats["num_device_alloc"]
        assert tree.total("mem.segment.free.count") == stats["num_device_free"]
        assert tree.total("mem.segment.alloc.bytes") == stats["reserved_bytes.all.allocated"]
        assert tree.total("mem.segment.free.bytes") == stats["reserved_bytes.all.freed"]
        assert tree.total("mem.alloc.retries") == stats["num_alloc_retries"]
        assert tree.total("mem.oom.count") == stats["num_ooms"]


def test_churn_retry_and_oom_on_their_lines(alloc):
    tree, _, _ = alloc
    assert line_total(tree, "CHURN", "mem.segment.alloc.count") == 60
    assert line_total(tree, "EMPTY", "mem.segment.free.count") == 60
    assert line_total(tree, "RETRY", "mem.alloc.retries") == 1
    assert line_total(tree, "RETRY", "mem.segment.free.bytes") == 200 << 20
    assert line_total(tree, "RETRY", "mem.segment.alloc.bytes") == 250 << 20
    assert line_total(tree, "OOM", "mem.oom.count") == 1
    # The gpu layer times the driver calls behind them (CUPTI): one per segment.
    assert line_total(tree, "CHURN", "mem.cudamalloc.count") == 60
    assert line_total(tree, "CHURN", "mem.cudamalloc.time") > 0
    assert line_total(tree, "EMPTY", "mem.cudafree.count") == 60
    assert line_total(tree, "RETRY", "mem.cudafree.count") == 1
    assert line_total(tree, "RETRY", "mem.cudamalloc.count") == 1
    assert line_total(tree, "OOM", "mem.cudafree.count") == 1
    assert line_total(tree, "OOM", "mem.cudamalloc.count") == 0  # refused before cudaMalloc


def test_analyzer_names_the_memory_causes(train, alloc):
    def memory_findings(out):
        doc = json.loads(subprocess.run([sys.executable, "-m", "deepcontext", "analyze", str(out),
                                         "--format", "json"], capture_output=True,
                                        text=True).stdout)
        return {(f["rule"], f["location"]["line"], f["evidence"].get("kind", ""))
                for f in doc["findings"] if f["category"] == "memory" and f["location"]}
    assert ("memory-peak", line_of("STEP"), "optimizer state") in memory_findings(train[2])
    assert {(r, line) for r, line, _ in memory_findings(alloc[2])
            if r == "allocator-churn"} == {("allocator-churn", line_of("EMPTY")),
                                           ("allocator-churn", line_of("RETRY")),
                                           ("allocator-churn", line_of("OOM"))}
