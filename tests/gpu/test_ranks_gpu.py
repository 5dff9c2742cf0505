"""Two ranks on two GPUs over NCCL under the real CLI: every rank profiled, DDP's bucket
all-reduces and FSDP's all-gathers / reduce-scatters attributed, NCCL kernels under them.

Run on a machine with two GPUs (NCCL multicast off, as the device notes say):
    NCCL_NVLS_ENABLE=0 python3 -m pytest -q -m gpu tests/gpu/test_ranks_gpu.py
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from deepcontext.tree import load

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    pytest.skip("needs two CUDA GPUs", allow_module_level=True)

PROGRAM = Path(__file__).parent / "programs" / "ranks_nccl.py"
STEPS = 4


def _line(marker: str) -> int:
    for i, text in enumerate(PROGRAM.read_text().splitlines(), 1):
        if f"# {marker}" in text:
            return i
    raise AssertionError(marker)


def _below(tree, marker, predicate):
    lines = [n.id for n in tree.nodes if n.frame.kind == "python"
             and n.frame.file.endswith(PROGRAM.name) and n.frame.line == _line(marker)]
    return [m for line in lines for m in (x.id for x in tree.walk(line)) if predicate(tree.nodes[m].frame)]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nccl")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0"}
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", "job.dcprof", "--",
                           sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", str(port), str(PROGRAM)],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return load(tmp / "job.dcprof")


def test_both_ranks_are_in_the_merged_profile(job):
    assert job.ranks() == [0, 1]
    assert all(e["complete"] for e in job.metadata["ranks"])


def test_ddp_bucket_allreduce_has_nccl_kernels_under_it(job):
    reduces = _below(job, "DDP_STEP", lambda f: f.kind == "op" and f.name == "c10d::allreduce_")
    assert reduces
    for rank in (0, 1):
        calls = sum(job.rank_exclusive(n, "op.count", rank) for n in reduces)
        assert calls >= STEPS and calls % STEPS == 0  # whole buckets, every step
        kernels = [k for n in reduces for k in (x.id for x in job.walk(n))
                   if job.nodes[k].frame.kind == "kernel" and job.nodes[k].frame.name.startswith("nccl")]
        assert kernels, "NCCL kernels sit under the all-reduce that launched them"
        assert sum(job.rank_inclusive_all("gpu.time", rank)[k] for k in kernels) > 0


def test_nccl_collectives_carry_their_bytes(job):
    (known,) = _below(job, "KNOWN", lambda f: f.kind == "op" and f.name == "c10d::allreduce_")
    reduces = _below(job, "DDP_STEP", lambda f: f.kind == "op" and f.name == "c10d::allreduce_")
    grads = 2 * (1024 * 1024 + 1024) * 4  # every float32 gradient, all-reduced once a step
    for rank in (0, 1):
        assert job.rank_exclusive(known, "op.count", rank) == STEPS
        assert job.rank_exclusive(known, "comm.bytes", rank) == STEPS * (1 << 20) * 4
        # NCCL's scope starts and ends on the issuing thread, inside the operator
        (scope,) = [c for c in job.nodes[known].children
                    if job.nodes[c].frame.name == "nccl:all_reduce"]
        assert job.rank_exclusive(scope, "op.count", rank) == STEPS
        assert sum(job.rank_exclusive(n, "comm.bytes", rank) for n in reduces) == STEPS * grads


def test_fsdp_collectives_are_attributed(job):
    names = {job.nodes[n].frame.name for n in _below(
        job, "FSDP_STEP", lambda f: f.kind == "op" and f.name.startswith("c10d::"))}
    assert {"c10d::_allgather_base_", "c10d::_reduce_scatter_base_"} & names, names
