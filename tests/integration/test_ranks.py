"""Multi-rank jobs under the real CLI: torchrun and mp.spawn over gloo, every rank profiled,
the output merged with exact per-rank values, the straggler and per-parameter rules."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from helpers import (  # noqa: E402
    PROGRAMS,
    children_named,
    line_of,
    loaded,
    python_nodes,
    subtree_ids,
)

CLI = [sys.executable, "-m", "deepcontext"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _record(tmp, *command, options=(), timeout=240):
    return subprocess.run([*CLI, "record", "-o", "job.dcprof", *options, "--", *command], cwd=tmp,
                          capture_output=True, text=True, timeout=timeout)


def _op_nodes(tree, program, marker, op):
    """The nodes of operator ``op`` below the program's marked line (through torch's own Python
    frames)."""
    return [node for line in python_nodes(tree, program, line_of(program, marker))
            for node in subtree_ids(tree, line)
            if tree.nodes[node].frame.kind == "op" and tree.nodes[node].frame.name == op]


def _op_counts(tree, rank, program, marker, op, metric="op.count"):
    """``metric`` (op.count) of ``op`` below the program's marked line, on ``rank``."""
    return sum(tree.rank_exclusive(n, metric, rank) for n in _op_nodes(tree, program, marker, op))


@pytest.fixture(scope="module")
def torchrun_job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("torchrun")
    # 1 ms samples: gloo's worker thread spends about 70 ms reducing the LARGE tensors, in 8
    # bursts of ~8 ms. The kernel checks a thread's CPU-time timer on the scheduler ticks that
    # find it running (every 4-10 ms, by its HZ), so bursts shorter than a tick can go unsampled:
    # with 4 bursts of ~5 ms (20-40 ms here) a rank's scope once had no sample in CI (2026-12-05).
    proc = _record(tmp, sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                   "--master_port", str(_free_port()), str(PROGRAMS / "ranks_ddp.py"),
                   options=("--sample-interval", "0.001"))
    assert proc.returncode == 0, proc.stderr
    return tmp, proc


def test_every_rank_writes_its_file_and_the_output_is_their_merge(torchrun_job):
    tmp, proc = torchrun_job
    assert sorted(p.name for p in tmp.glob("*.dcprof")) == [
        "job.dcprof", "job.launcher.dcprof", "job.rank0.dcprof", "job.rank1.dcprof"]
    # the ranks share the pipe, so their lines may interleave; each says it once
    assert [proc.stdout.count(f"rank {r} of 2 done") for r in (0, 1)] == [1, 1], proc.stdout
    assert proc.stderr.count("deepcontext: profile of 2 ranks written to") == 1, proc.stderr
    merged = loaded(tmp / "job.dcprof")
    assert merged.ranks() == [0, 1]
    assert [e["rank"] for e in merged.metadata["ranks"]] == [0, 1]
    assert merged.metadata["launcher"] == "job.launcher.dcprof"
    assert merged.metadata["complete"] is True
    pids = {loaded(tmp / f"job.rank{r}.dcprof").metadata["pid"] for r in (0, 1)}
    assert len(pids) == 2 and loaded(tmp / "job.launcher.dcprof").metadata["pid"] not in pids
    for r in (0, 1):
        single = loaded(tmp / f"job.rank{r}.dcprof")
        assert single.metadata["rank"] == r and single.metadata["world_size"] == 2
        # the merged profile keeps exactly what the rank's own file holds
        assert merged.rank_view(r).total("op.count") == single.total("op.count")
    assert merged.total("op.count") == sum(merged.rank_view(r).total("op.count") for r in (0, 1))


def test_collectives_are_attributed_per_rank_exactly(torchrun_job):
    tree = loaded(torchrun_job[0] / "job.dcprof")
    prog = "ranks_ddp.py"
    for rank in (0, 1):
        # 6 layers x 2 parameters x 2 steps, one all_reduce each
        assert _op_counts(tree, rank, prog, "PER_PARAM", "c10d::allreduce_") == 24
        # DDP: one bucket per step, all-reduced from the AccumulateGrad that completed it (its
        # hook, which the engine runs after the node: under the node)
        (backward,) = python_nodes(tree, prog, line_of(prog, "BACKWARD"))
        acc = "torch::autograd::AccumulateGrad"
        (reduce,) = [n for n in subtree_ids(tree, backward)
                     if tree.nodes[n].frame.name == "c10d::allreduce_"]
        assert tree.nodes[tree.nodes[reduce].parent].frame.name == acc
        assert tree.rank_exclusive(reduce, "op.count", rank) == 3
    # only rank 1 ran the extra work
    (extra,) = python_nodes(tree, prog, line_of(prog, "STRAGGLE"))
    assert tree.rank_inclusive_all("cpu.time", 0)[extra] == 0
    assert tree.rank_inclusive_all("cpu.time", 1)[extra] > 0.3


def test_collectives_carry_their_bytes_under_the_line_that_issued_them(torchrun_job):
    tree = loaded(torchrun_job[0] / "job.dcprof")
    prog, f32 = "ranks_ddp.py", 4
    bucket = (16 * 16 + 16 + 16 * 4 + 4) * f32  # DDP's one bucket: every gradient of the model
    expected = {  # marker: (c10d operator, its backend's scope, calls, bytes) on every rank
        "BACKWARD": ("c10d::allreduce_", "gloo:all_reduce", 3, 3 * bucket),
        "PER_PARAM": ("c10d::allreduce_", "gloo:all_reduce", 24, 2 * 6 * (8 * 8 + 8) * f32),
        "SMALL": ("c10d::allreduce_", "gloo:all_reduce", 5, 5 * 256 * f32),
        "BROADCAST": ("c10d::broadcast_", "gloo:broadcast", 1, 100 * 8),
        "ALLGATHER": ("c10d::allgather_", "gloo:all_gather", 1, 64 * 4),  # this rank's input
        "BARRIER": ("c10d::barrier", "gloo:barrier", 1, 0),
        "LARGE": ("c10d::allreduce_", "gloo:all_reduce", 8, 8 * (16 << 20) * f32),
    }
    for rank in (0, 1):
        for marker, (op, scope, calls, nbytes) in expected.items():
            (node,) = _op_nodes(tree, prog, marker, op)
            assert tree.rank_exclusive(node, "op.count", rank) == calls, (marker, rank)
            assert tree.rank_exclusive(node, "comm.bytes", rank) == nbytes, (marker, rank)
            # the backend's scope (run on gloo's worker thread) nests under the operator
            (backend,) = children_named(tree, node, "op", scope)
            assert tree.rank_exclusive(backend, "op.count", rank) == calls, (marker, rank)
    # the merged view adds the ranks' bytes
    (large,) = _op_nodes(tree, prog, "LARGE", "c10d::allreduce_")
    assert tree.exclusive(large, "comm.bytes") == 2 * 8 * (16 << 20) * f32


def test_gloo_worker_thread_time_lies_under_the_collective_it_runs(torchrun_job):
    tree = loaded(torchrun_job[0] / "job.dcprof")
    for rank in (0, 1):
        view = tree.rank_view(rank)
        # no collective is left on its own at the top of a rank (the worker has no Python)
        assert [view.nodes[c].frame.name for c in view.nodes[0].children
                if view.nodes[c].frame.kind == "op"] == []
        for node in view.nodes:
            if node.frame.kind == "op" and node.frame.name.startswith("gloo:"):
                assert view.nodes[node.parent].frame.name.startswith("c10d::"), node.frame.name
        # the worker's own samples: on the backend's scope under the LARGE line's operator
        (large,) = _op_nodes(view, "ranks_ddp.py", "LARGE", "c10d::allreduce_")
        (backend,) = children_named(view, large, "op", "gloo:all_reduce")
        assert view.exclusive(backend, "cpu.time") > 0, rank


def test_straggler_and_per_parameter_rules_name_the_line_and_rank(torchrun_job):
    tmp = torchrun_job[0]
    proc = subprocess.run([*CLI, "analyze", "job.dcprof", "--format", "json"], cwd=tmp,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    findings = json.loads(proc.stdout)["findings"]
    (straggler,) = [f for f in findings if f["rule"] == "rank-straggler"]
    assert straggler["evidence"]["rank"] == 1
    assert straggler["location"]["line"] == line_of("ranks_ddp.py", "STRAGGLE")
    (per_param,) = [f for f in findings if f["rule"] == "collective-per-parameter"]
    assert per_param["location"]["line"] == line_of("ranks_ddp.py", "PER_PARAM")
    assert per_param["evidence"]["calls"] == 48  # both ranks


def test_report_and_diff_show_one_rank(torchrun_job):
    tmp = torchrun_job[0]
    one = subprocess.run([*CLI, "report", "job.dcprof", "--rank", "1", "--format", "json",
                          "--metric", "op.count"], cwd=tmp, capture_output=True, text=True)
    assert one.returncode == 0, one.stderr
    both = subprocess.run([*CLI, "report", "job.dcprof", "--format", "json", "--metric",
                           "op.count"], cwd=tmp, capture_output=True, text=True)
    total = lambda doc: json.loads(doc)["totals"]["op.count"]  # noqa: E731
    rank1 = loaded(tmp / "job.rank1.dcprof").total("op.count")
    assert total(one.stdout) == rank1 and total(both.stdout) > rank1
    bad = subprocess.run([*CLI, "report", "job.dcprof", "--rank", "7"], cwd=tmp,
                         capture_output=True, text=True)
    assert bad.returncode != 0 and bad.stderr.startswith("deepcontext: error: --rank 7")
    assert "Traceback" not in bad.stderr
    diff = subprocess.run([*CLI, "diff", "job.dcprof", "job.dcprof", "--rank-before", "0",
                           "--rank-after", "1", "--metric", "cpu.time"], cwd=tmp,
                          capture_output=True, text=True)
    assert diff.returncode == 0, diff.stderr
    assert "busy (ranks_ddp.py" in diff.stdout


def test_mp_spawn_workers_are_ranks(tmp_path):
    prog = "ranks_spawn.py"
    proc = _record(tmp_path, sys.executable, str(PROGRAMS / prog), "2", str(_free_port()))
    assert proc.returncode == 0, proc.stderr
    assert "spawned 2 done False" in proc.stdout
    assert sorted(p.name for p in tmp_path.glob("*.dcprof")) == [
        "job.dcprof", "job.launcher.dcprof", "job.rank0.dcprof", "job.rank1.dcprof"]
    tree = loaded(tmp_path / "job.dcprof")
    assert tree.ranks() == [0, 1]
    for rank in (0, 1):
        assert _op_counts(tree, rank, prog, "REDUCE", "c10d::allreduce_") == 3
        assert _op_counts(tree, rank, prog, "LOCAL", "aten::mul") == rank + 1


def test_a_stale_rank_file_is_refused_before_the_job_starts(tmp_path):
    (tmp_path / "job.rank0.dcprof").write_bytes(b"")
    proc = _record(tmp_path, sys.executable, "-c", "print('ran')")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().startswith("deepcontext: error:") and "job.rank0.dcprof" in proc.stderr
