"""Literal trees for the browser tests (exact values, hostile names, a 100,000-node tree)."""

from __future__ import annotations

from deepcontext.tree.cct import CallingContextTree
from deepcontext.tree.frame import Frame

HOSTILE = '<img src=x onerror=alert(1)></script><script>alert(2)</script>"\'\x1b[31m'


def training_tree() -> CallingContextTree:
    """Two threads: Python -> operators -> a kernel and a copy; cpu and gpu time."""
    t = CallingContextTree({"command": ["python", "train.py"]})
    main = t.child(0, Frame.make("thread", "MainThread", tid=1))
    step = t.add_path([Frame.make("python", "<module>", "/w/train.py", 30),
                       Frame.make("python", "train_step", "/w/train.py", 12)], main)
    mm = t.add_path([Frame.make("op", "aten::mm"),
                     Frame.make("kernel", "ampere_sgemm_128x64<float>")], step)
    t.add_metric(mm, "gpu.time", 0.75)
    cp = t.add_path([Frame.make("op", "aten::to"), Frame.make("memcpy", "HtoD")], step)
    t.add_metric(cp, "gpu.time", 0.25)
    t.add_metric(step, "cpu.time", 1.5)
    sync = t.child(step, Frame.make("sync", "cudaDeviceSynchronize"))
    t.add_metric(sync, "cpu.time", 0.5)
    loader = t.child(0, Frame.make("thread", "Loader", tid=2))
    read = t.add_path([Frame.make("python", "read", "/w/data.py", 7),
                       Frame.make("native", "read", "/lib/libc.so.6")], loader)
    t.add_metric(read, "cpu.time", 2.0)
    return t


def hostile_tree() -> CallingContextTree:
    t = CallingContextTree({"command": [HOSTILE], "notes": [HOSTILE]})
    leaf = t.add_path([Frame.make("python", HOSTILE, f"/tmp/{HOSTILE}.py", 3),
                       Frame.make("op", HOSTILE, note=HOSTILE),
                       Frame.make("kernel", "void k<" + HOSTILE + ">(float*)")])
    t.add_metric(leaf, "cpu.time", 1.0)
    t.add_metric(t.nodes[leaf].parent, "cpu.time", 0.5)
    return t


def big_tree(target: int = 100_000) -> CallingContextTree:
    """About ``target`` nodes: 40 Python lines x 50 operators x 50 kernels, uneven values."""
    t = CallingContextTree({"command": ["python", "big.py"]})
    i = 0
    while len(t) < target:
        a, b, c = i % 40, (i // 40) % 50, i // 2000
        leaf = t.add_path([Frame.make("python", f"layer{a}", "/w/big.py", a + 1),
                           Frame.make("op", f"aten::op{b}"),
                           Frame.make("kernel", f"kernel_{c}_{b}<float>")])
        t.add_metric(leaf, "gpu.time", 1e-4 * (1 + (i * 7919) % 97))
        t.add_metric(leaf, "gpu.launches", 1 + i % 3)
        t.add_metric(t.nodes[leaf].parent, "cpu.time", 1e-5 * (1 + i % 13))
        i += 1
    return t
