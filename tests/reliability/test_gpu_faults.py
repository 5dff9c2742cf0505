"""Process ends and children on a real GPU (run on the device; skipped without one)."""

from __future__ import annotations

import json
import signal
import time

import pytest
from reliability_harness import CLI, child_env, profile_meta, record, run_child, signal_when_ready
from reliability_programs import program

pytestmark = [pytest.mark.gpu, pytest.mark.torch]

GPU_WORK = """
import torch
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(4096, 4096, device="cuda")
b = torch.randn(4096, 4096, device="cuda")
def gpu_step(n):
    for _ in range(n):
        c = a @ b
    return c
gpu_step(20)
torch.cuda.synchronize()
"""


def _kinds(tmp_path, prof):
    r = run_child([*CLI, "report", str(prof), "--format", "json", "--threshold", "0"], cwd=tmp_path)
    assert r.rc == 0, r.describe()
    kinds, stack = set(), [json.loads(r.out)["tree"]]
    while stack:
        node = stack.pop()
        kinds.add(node["frame"]["kind"])
        stack.extend(node["children"])
    return kinds


def test_sigkill_during_gpu_work_keeps_kernels_of_the_last_flush(tmp_path):
    body = GPU_WORK + """
wait_for_flush(0.6)
ready()
while True:
    gpu_step(50)
    torch.cuda.synchronize()
"""
    r = record(tmp_path, program(body), program_args=[str(tmp_path / "ready")], timeout=180,
               during=signal_when_ready(tmp_path / "ready", signal.SIGKILL, delay=0.5))
    assert r.rc == -signal.SIGKILL, r.describe()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is False
    assert "kernel" in _kinds(tmp_path, tmp_path / "prof.dcprof")


def test_sigterm_during_long_device_sync_is_prompt_and_complete(tmp_path):
    body = GPU_WORK + """
ready()
gpu_step(6000)  # ~15 s of queued matmuls
torch.cuda.synchronize()
print("sync returned", flush=True)
"""
    timing = {}

    def during(proc):
        signal_when_ready(tmp_path / "ready", signal.SIGTERM, delay=1.0)(proc)
        timing["sent"] = time.monotonic()
        try:
            proc.wait(20)
        finally:
            timing["gone"] = time.monotonic()

    r = record(tmp_path, program(body), program_args=[str(tmp_path / "ready")], timeout=180,
               during=during)
    assert r.rc == -signal.SIGTERM, r.describe()
    assert "sync returned" not in r.out
    assert timing["gone"] - timing["sent"] < 8, r.describe()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True
    assert "kernel" in _kinds(tmp_path, tmp_path / "prof.dcprof")


def test_dataloader_fork_after_cuda_init(tmp_path):
    body = GPU_WORK + """
from torch.utils.data import DataLoader, TensorDataset
if __name__ == "__main__":
    data = TensorDataset(torch.arange(256.0).reshape(64, 4))
    loader = DataLoader(data, batch_size=8, num_workers=2, multiprocessing_context="fork")
    total = 0.0
    for (batch,) in loader:
        total += float((batch.cuda() * 2).sum())
    print("total", int(total), flush=True)
"""
    r = record(tmp_path, program(body), program_args=["unused"], timeout=180)
    assert r.rc == 0 and "total 65280" in r.out, r.describe()
    assert sorted(p.name for p in tmp_path.glob("*.dcprof*")) == ["prof.dcprof"]
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True
    assert "kernel" in _kinds(tmp_path, tmp_path / "prof.dcprof")


def test_hidden_gpus_give_a_note_and_a_cpu_profile(tmp_path):
    body = """
import torch
x = torch.randn(256, 256)
for _ in range(20):
    x = torch.tanh(x @ x)
print("cuda", torch.cuda.is_available(), flush=True)
"""
    r = record(tmp_path, program(body), program_args=["unused"], timeout=180,
               env=child_env({"CUDA_VISIBLE_DEVICES": ""}))
    assert r.rc == 0 and "cuda False" in r.out, r.describe()
    meta = profile_meta(tmp_path / "prof.dcprof", r)
    assert meta["complete"] is True
    kinds = _kinds(tmp_path, tmp_path / "prof.dcprof")
    assert "op" in kinds and "kernel" not in kinds
    assert any("GPU" in note for note in meta.get("notes", [])), meta.get("notes")
