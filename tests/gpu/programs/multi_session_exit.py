"""Several deepcontext sessions in one CUDA process, then a normal exit: must exit 0 (no heap
corruption from threads that outlive the profiler's statics at exit)."""

import sys
import tempfile

import torch

import deepcontext

x = torch.randn(512, 512, device="cuda", requires_grad=True)
with tempfile.TemporaryDirectory() as d:
    for i in range(3):
        with deepcontext.profile(f"{d}/s{i}.dcprof", context="python,op,gpu"):
            for _ in range(5):
                (x @ x).relu().sum().backward()
            torch.cuda.synchronize()
        tree = deepcontext.load(f"{d}/s{i}.dcprof")
        print(i, round(tree.total("gpu.time") * 1e3, 3), "ms gpu", flush=True)
sys.exit(0)
