"""Known GPU work for tests/gpu/test_gpu_capture.py: the counts below are asserted exactly.

Run as-is it is profiled by ``deepcontext record``; with ``--torch-profiler OUT.json`` it runs the
same work under torch.profiler (CPU+CUDA) and writes its kernel counts, for a cross-check.
"""

import ctypes
import json
import sys
from collections import Counter

import torch

N_MATMUL = 6
M_ELEMENTWISE = 5
K_REPLAY = 4
ROWS = 512
GRAPH_LEN = 4096
PINNED_FLOATS = 1024
MEMSET_BYTES = 16384


def cudart() -> ctypes.CDLL:
    """The CUDA runtime torch already loaded (found by soname)."""
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    raise SystemExit("no libcudart")


def work() -> None:
    dev = torch.device("cuda")
    a = torch.randn(ROWS, ROWS, device=dev)
    b = torch.randn(ROWS, ROWS, device=dev)
    warm = a @ b  # WARMUP
    torch.cuda.synchronize()
    c = warm
    for _ in range(N_MATMUL):
        c = a @ b  # MATMUL
    d = c
    for _ in range(M_ELEMENTWISE):
        d = d * 1.0001  # ELEMENTWISE
    torch.cuda.synchronize()  # DEVICE_SYNC
    host = d.cpu()  # D2H
    value = d.sum().item()  # ITEM
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        e = a + 1  # SIDE_STREAM
    side.synchronize()  # STREAM_SYNC
    pinned = torch.ones(PINNED_FLOATS, pin_memory=True)
    on_gpu = pinned.to(dev, non_blocking=True)  # H2D_PINNED
    target = torch.empty(MEMSET_BYTES // 4, device=dev)
    rt = cudart()
    rt.cudaMemset(ctypes.c_void_p(target.data_ptr()), 0, ctypes.c_size_t(MEMSET_BYTES))  # MEMSET
    torch.cuda.synchronize()

    static_x = torch.randn(GRAPH_LEN, device=dev)
    warm_stream = torch.cuda.Stream()
    warm_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm_stream):
        for _ in range(2):
            static_y = static_x * 2 + 1  # GRAPH_WARMUP
    torch.cuda.current_stream().wait_stream(warm_stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = static_x * 2 + 1  # CAPTURE
    for _ in range(K_REPLAY):
        graph.replay()  # REPLAY
    torch.cuda.synchronize()

    w = torch.randn(ROWS, ROWS, device=dev, requires_grad=True)
    x = torch.randn(64, ROWS, device=dev)
    loss = (x @ w).relu().sum()  # FORWARD
    loss.backward()  # BACKWARD
    torch.cuda.synchronize()
    print("done", host.shape[0], round(value) != 0.5, e.shape[0], static_y.shape[0], on_gpu.shape[0])


def under_torch_profiler(out: str) -> None:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        work()
    kernels: Counter[str] = Counter()
    total_us = 0.0
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA and not evt.name.startswith(("Memcpy", "Memset")):
            kernels[evt.name] += 1
            total_us += evt.time_range.elapsed_us()
    with open(out, "w") as f:
        json.dump({"kernels": dict(kernels), "kernel_time_us": total_us}, f)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--torch-profiler":
        under_torch_profiler(sys.argv[2])
    else:
        work()
