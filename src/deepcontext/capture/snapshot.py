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
    """The profile's tree from one snapshot of the core's, built whole."""
    return TreeBuilder().build(raw, metadata)


class TreeBuilder:
    """Builds a session's trees from the core's snapshots. A periodic flush holds the GIL while
    it builds and writes (the program's thread waits for it), so after the first build only
    what changed is done again: frames and contexts new since the last snapshot are added to
    the same tree, and every metric is set anew. A context that lost its metrics (a schedule's
    warm-up rolled back), a root marker whose time went, or torch.compile's placement builds
    the tree whole, as does ``fresh`` (the final flush: node ids then follow the core's order,
    whatever the flushes' timing was; monitor.snapshot_tree passes it with the JAX layer too)."""

    def __init__(self) -> None:
        self._frames: dict[tuple, Frame] = {}  # the core's frame rows, made once
        self._tree: CallingContextTree | None = None
        self._mapped: list[int] = []  # the core's node -> the tree's (-1: not in it yet)

    def build(self, raw: Any, metadata: dict[str, Any], fresh: bool = True) -> CallingContextTree:
        nodes, frames, metric_names, metrics = raw
        made = [self._frame(row) for row in frames]
        # The native tree outlives sessions (node ids stay valid for the hooks); a profile keeps
        # only the contexts that carry a metric in this session.
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
        if compiled is not None:  # torch.compile ran: kernels under their source lines
            self._tree = None
            tree = CallingContextTree(metadata)
            return _off_the_root(_build_compiled(tree, compiled, nodes, made, alive, metric_names,
                                                 metrics))
        tree, mapped = self._tree_to_extend(alive, fresh)
        extended = tree is self._tree
        mapped += [-1] * (len(nodes) - len(mapped))
        for i in range(1, len(nodes)):
            if not alive[i] or mapped[i] >= 0:
                continue
            parent, fid = nodes[i]
            frame = made[fid]
            p = mapped[parent]  # (a parent's id is below its child's: placed already)
            mapped[i] = p if _folds(frame, p == 0) else tree.child(p, frame)  # folds: the caller
        tree.metadata = dict(metadata)
        # (tree.add_metric's work, in line: thousands a flush, into a tree nothing has read yet)
        placed = tree.nodes
        for node, mid, value in metrics:
            where = mapped[node]
            if where < 0:  # (a zero in a context that holds nothing else: not in the profile)
                continue
            m = placed[where].metrics
            name = metric_names[mid]
            m[name] = m.get(name, 0.0) + value
        marker = tree.existing_child(0, NO_FRAME) if extended and not tree.root.metrics else None
        if marker is not None and marker not in mapped:  # (the core has a node of that name too)
            # the time that folded onto the root went (a warm-up rolled back): no marker for it
            return self.build(raw, metadata, fresh=True)
        self._tree, self._mapped = tree, mapped
        return _off_the_root(tree)

    def _frame(self, row: tuple) -> Frame:
        frame = self._frames.get(row)
        if frame is None:
            kind, name, file, line, extra = row
            frame = self._frames[row] = Frame.make(kind, name, file, line, **_parse_extra(extra))
        return frame

    def _tree_to_extend(self, alive: list[bool],
                        fresh: bool) -> tuple[CallingContextTree, list[int]]:
        """The last tree with its metrics cleared, where a whole build would give every context
        in it again (each still alive; build checks the marker); else a new one."""
        tree, mapped = self._tree, self._mapped
        if (fresh or tree is None
                or any(m >= 0 and not alive[i] for i, m in enumerate(mapped) if i)):
            return CallingContextTree(), [0]
        tree.clear_metrics()
        return tree, mapped


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
