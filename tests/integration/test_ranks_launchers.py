"""``accelerate launch`` under the real CLI: each process it starts is profiled as its rank.

The launcher runs as ``python -m accelerate.commands.launch``: the module behind ``accelerate
launch`` (the ``accelerate`` script dispatches to the same ``launch_command``), started by this
test's interpreter so the job uses its torch and deepcontext."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from helpers import PROGRAMS, line_of, loaded, python_nodes, subtree_ids  # noqa: E402

PROG = "ranks_accelerate.py"
STEPS = 3
BUCKET = (16 * 16 + 16 + 16 * 4 + 4) * 4  # DDP's one bucket: every float32 gradient


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _accelerate(tmp, *options):
    cmd = [sys.executable, "-m", "deepcontext", "record", "-o", "job.dcprof", "--",
           sys.executable, "-m", "accelerate.commands.launch", *options, "--num_processes", "2",
           "--main_process_port", str(_free_port()), str(PROGRAMS / PROG)]
    proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return proc


def _ops(tree, marker, op):
    return [n for line in python_nodes(tree, PROG, line_of(PROG, marker))
            for n in subtree_ids(tree, line)
            if tree.nodes[n].frame.kind == "op" and tree.nodes[n].frame.name == op]


def _count(tree, rank, marker, op, metric="op.count"):
    return sum(tree.rank_exclusive(n, metric, rank) for n in _ops(tree, marker, op))


def test_accelerate_launch_profiles_both_ranks(tmp_path):
    # on a machine without GPUs, --multi_gpu is accelerate's way to start ranks (torchrun's
    # launcher, in its own process): a DDP job over gloo
    proc = _accelerate(tmp_path, "--multi_gpu")
    assert [proc.stdout.count(f"rank {r} of 2 done") for r in (0, 1)] == [1, 1], proc.stdout
    assert sorted(p.name for p in tmp_path.glob("*.dcprof")) == [
        "job.dcprof", "job.launcher.dcprof", "job.rank0.dcprof", "job.rank1.dcprof"]
    tree = loaded(tmp_path / "job.dcprof")
    assert tree.ranks() == [0, 1] and tree.metadata["world_size"] == 2
    for rank in (0, 1):
        assert _count(tree, rank, "FORWARD", "aten::linear") == 2 * STEPS
        # accelerator.backward(loss): DDP's bucket all-reduce under that line, with its bytes
        assert _count(tree, rank, "BACKWARD", "c10d::allreduce_") == STEPS
        assert _count(tree, rank, "BACKWARD", "c10d::allreduce_", "comm.bytes") == STEPS * BUCKET


def test_accelerate_launch_cpu_profiles_its_one_worker(tmp_path):
    # with --cpu, accelerate starts the script once itself (no launcher of ranks): that one
    # process is the job, rank 0 of 1
    proc = _accelerate(tmp_path, "--cpu")
    assert "rank 0 of 1 done" in proc.stdout
    assert "deepcontext: profile of 1 rank written to" in proc.stderr
    assert sorted(p.name for p in tmp_path.glob("*.dcprof")) == [
        "job.dcprof", "job.launcher.dcprof", "job.rank0.dcprof"]
    tree = loaded(tmp_path / "job.dcprof")
    assert tree.ranks() == [0] and tree.metadata["world_size"] == 1
    assert _count(tree, 0, "FORWARD", "aten::linear") == 2 * STEPS
    assert _ops(tree, "BACKWARD", "c10d::allreduce_") == []  # one process: nothing to reduce
    # the launcher's own profile has none of the program
    assert python_nodes(loaded(tmp_path / "job.launcher.dcprof"), PROG, line_of(PROG, "FORWARD")) == []
