"""Literal calling context trees for the exporter tests: exact values, hostile names."""

from __future__ import annotations

from deepcontext.tree.cct import CallingContextTree
from deepcontext.tree.frame import Frame

HOSTILE = '<img src=x onerror=alert(1)>;</script>\x1b[31m"\'\ud800'


def training_tree() -> CallingContextTree:
    """Two threads; Python lines -> operators -> kernels, copies and a sync; three metrics."""
    t = CallingContextTree({"command": ["python", "train.py"], "start_time": 100.0,
                            "end_time": 112.5})
    main = t.child(0, Frame.make("thread", "MainThread", tid=1))
    step = t.add_path([Frame.make("python", "<module>", "/w/train.py", 30),
                       Frame.make("python", "train_step", "/w/train.py", 12)], main)
    mm = t.add_path([Frame.make("op", "aten::mm"),
                     Frame.make("kernel", "ampere_sgemm_128x64<float>")], step)
    t.add_metric(mm, "gpu.time", 0.75)
    t.add_metric(mm, "gpu.launches", 3)
    cp = t.add_path([Frame.make("op", "aten::to"), Frame.make("memcpy", "HtoD")], step)
    t.add_metric(cp, "gpu.time", 0.25)
    t.add_metric(cp, "memcpy.bytes", 4096)
    t.add_metric(step, "cpu.time", 1.5)
    sync = t.child(step, Frame.make("sync", "cudaDeviceSynchronize"))
    t.add_metric(sync, "cpu.time", 0.5)
    loader = t.child(0, Frame.make("thread", "Loader", tid=2))
    read = t.add_path([Frame.make("python", "read", "/w/data.py", 7),
                       Frame.make("native", "read", "/lib/libc.so.6")], loader)
    t.add_metric(read, "cpu.time", 2.0)
    t.add_metric(t.nodes[read].parent, "cpu.time", 0.125)
    return t


def hostile_tree() -> CallingContextTree:
    """Every name, file and extra attribute is hostile."""
    t = CallingContextTree({"command": [HOSTILE]})
    leaf = t.add_path([Frame.make("python", HOSTILE, f"/tmp/{HOSTILE}.py", 3),
                       Frame.make("op", HOSTILE + ";x"),
                       Frame.make("kernel", "void k<" + HOSTILE + ">(float*)", note=HOSTILE)])
    t.add_metric(leaf, "cpu.time", 1.0)
    t.add_metric(t.nodes[leaf].parent, "cpu.time", 0.5)
    return t


def deep_tree(depth: int = 3000) -> CallingContextTree:
    """Deep recursion: deeper than Python's default recursion limit."""
    t = CallingContextTree()
    leaf = t.add_path(Frame.make("python", "recurse", "/w/r.py", 2) if i % 2 else
                      Frame.make("python", "helper", "/w/r.py", 5) for i in range(depth))
    t.add_metric(leaf, "cpu.time", 1.0)
    return t
