"""Literal trees for rule tests (ours and users'): build the exact shape a recorded profile has
in a few lines, e.g.

    tree = build([
        ([user(10, "main"), user(4, "gelu"), op("aten::mul")], {"op.count": 300, "op.time": 0.01}),
    ])
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..tree.cct import CallingContextTree
from ..tree.frame import Frame

USER_FILE = "/home/user/project/train.py"
TORCH_DIR = "/usr/lib/python3.11/site-packages/torch"


def user(line: int, function: str = "main", file: str = USER_FILE) -> Frame:
    """A frame of the user's own code."""
    return Frame.make("python", function, file, line)


def lib(function: str, file: str = f"{TORCH_DIR}/nn/modules/module.py", line: int = 1) -> Frame:
    """A library (torch) Python frame."""
    return Frame.make("python", function, file, line)


def op(name: str, **extra: Any) -> Frame:
    return Frame.make("op", name, **extra)


def kernel(name: str, **extra: Any) -> Frame:
    return Frame.make("kernel", name, **extra)


def memcpy(direction: str, pinned: bool, device: int = 0) -> Frame:
    """A copy frame as the GPU capture writes it: ``HtoD pageable`` with src/dst memory kinds."""
    host = "pinned" if pinned else "pageable"
    src, dst = {"HtoD": (host, "device"), "DtoH": ("device", host)}.get(direction,
                                                                        ("device", "device"))
    name = f"{direction} {host}" if direction in ("HtoD", "DtoH") else direction
    return Frame.make("memcpy", name, src=src, dst=dst, device=device)


def sync(name: str = "cudaStreamSynchronize") -> Frame:
    return Frame.make("sync", name)


def instruction(pc: str, **extra: Any) -> Frame:
    return Frame.make("instruction", pc, pc=pc, **extra)


def marker(name: str = "backward") -> Frame:
    return Frame.make("marker", name)


def build(paths: Iterable[tuple[list[Frame], dict[str, float]]],
          metadata: dict[str, Any] | None = None) -> CallingContextTree:
    """A tree holding each path with the given exclusive metrics at its leaf."""
    tree = CallingContextTree(metadata or {"start_time": 0.0, "end_time": 1.0})
    for frames, metrics in paths:
        leaf = tree.add_path(frames)
        for name, value in metrics.items():
            tree.add_metric(leaf, name, value)
    tree.self_check()
    return tree


def node_of(tree: CallingContextTree, frames: list[Frame]) -> int:
    """The id of the node at the end of ``frames`` (which must exist)."""
    nid = 0
    for f in frames:
        nid = next(c for c in tree.nodes[nid].children if tree.nodes[c].frame == f)
    return nid
