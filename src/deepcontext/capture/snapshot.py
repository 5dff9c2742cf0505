"""Rebuild the native tree as a ``CallingContextTree``, hiding the profiler's own frames."""

from __future__ import annotations

import os
from typing import Any

from ..tree.cct import CallingContextTree
from ..tree.frame import MARKER, PYTHON, Frame
from . import inductor
from .inductor.placement import Placer

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _is_own(file: str) -> bool:
    """Frames of deepcontext itself (launcher, dispatch tier) are never part of a user's context."""
    return file.startswith(_PACKAGE_DIR)


def _is_launcher(file: str) -> bool:
    return file in ("<frozen runpy>", "<frozen importlib._bootstrap>",
                    "<frozen importlib._bootstrap_external>") or file.endswith("/runpy.py")


def _parse_extra(extra: str) -> dict[str, str]:
    out = {}
    for part in extra.split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v
    return out


# Where time with no frame of the program's goes (the core's name for a frameless sample).
NO_FRAME = Frame.make(MARKER, "<no Python frame>")


def _off_the_root(tree: CallingContextTree) -> CallingContextTree:
    """A sample in the launcher's or the profiler's own frames alone (the program not started
    yet, or returned) folds onto the root. The root is no context, and the exporters, whose
    stacks start below it, would drop that time: it goes under ``NO_FRAME``."""
    root = tree.nodes[0]
    if root.metrics:
        nid = tree.child(0, NO_FRAME)
        for name, value in root.metrics.items():
            tree.add_metric(nid, name, value)
        root.metrics.clear()
    return tree


def _folds(frame: Frame, at_root: bool) -> bool:
    """Whether a frame collapses into its caller while converting (profiler or launcher)."""
    return frame.kind == PYTHON and (_is_own(frame.file) or (at_root and _is_launcher(frame.file)))


def build_tree(raw: Any, metadata: dict[str, Any]) -> CallingContextTree:
    nodes, frames, metric_names, metrics = raw
    made = [Frame.make(kind, name, file, line, **_parse_extra(extra))
            for kind, name, file, line, extra in frames]
    # The native tree outlives sessions (node ids stay valid for the hooks); a profile keeps only
    # the contexts that carry a metric in this session.
    alive = [False] * len(nodes)
    for node, _, value in metrics:
        if value:
            alive[node] = True
    compiled = inductor.snapshot_state() if inductor.active() else None
    for event in compiled.compiles if compiled else ():
        if event.node < len(nodes):
            alive[event.node] = True  # where a compilation ran (it may carry no sample)
    for i in range(len(nodes) - 1, 0, -1):
        if alive[i]:
            alive[nodes[i][0]] = True
    tree = CallingContextTree(metadata)
    if compiled is not None:  # torch.compile ran: kernels under their source lines
        return _off_the_root(_build_compiled(tree, compiled, nodes, made, alive, metric_names,
                                             metrics))
    mapped = [0] * len(nodes)
    for i in range(1, len(nodes)):
        if not alive[i]:
            continue
        parent, fid = nodes[i]
        frame = made[fid]
        p = mapped[parent]
        if _folds(frame, p == 0):
            mapped[i] = p  # collapse into the caller
        else:
            mapped[i] = tree.child(p, frame)
    for node, mid, value in metrics:
        tree.add_metric(mapped[node], metric_names[mid], value)
    return _off_the_root(tree)


def _build_compiled(tree: CallingContextTree, state: Any, nodes: Any, made: list[Frame],
                    alive: list[bool], metric_names: Any, metrics: Any) -> CallingContextTree:
    placer = Placer(state, tree)
    placed = placer.build(nodes, made, alive, _folds)
    for node, mid, value in metrics:
        name = metric_names[mid]
        for nid, weight in placed[node]:
            tree.add_metric(nid, name, value * weight)
    compiles = placer.add_compiles(placed)
    placer.add_compile_host()
    tree.metadata["torch_compile"] = {
        "compiles": compiles,
        "graph_breaks": list(state.graph_breaks),
        "fx_graph_cache": dict(state.fx_cache),
        "kernel_calls": len(placer.mapped_calls) + len(placer.unmapped_calls),
        "kernel_calls_without_provenance": len(placer.unmapped_calls),
    }
    return tree
