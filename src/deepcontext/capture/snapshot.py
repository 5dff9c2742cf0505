"""Rebuild the native tree as a ``CallingContextTree``, hiding the profiler's own frames."""

from __future__ import annotations

import os
from typing import Any

from ..tree.cct import CallingContextTree
from ..tree.frame import MARKER, PYTHON, Frame
from . import inductor
from .inductor import placement

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


def take(core: Any) -> Any:
    """The core's snapshot of the session's contexts (nodes, frames, metric names, metrics, and
    each node's id in the core), with the contexts where a compilation ran (which may carry no
    metric) kept."""
    keep = [e.node for e in inductor.snapshot_state().compiles] if inductor.active() else []
    return core.snapshot(keep)


def build_tree(raw: Any, metadata: dict[str, Any]) -> CallingContextTree:
    """The profile's tree from one snapshot of the core's, built whole."""
    return TreeBuilder().build(raw, metadata)


class TreeBuilder:
    """Builds a session's trees from the core's snapshots. A periodic flush holds the GIL while
    it builds and writes (the program's thread waits for it), so after the first build only
    what changed is done again: frames and contexts new since the last snapshot are added to
    the same tree, and every metric is set anew. A context that lost its metrics (a schedule's
    warm-up rolled back) or a root marker whose time went builds the tree whole, as does
    ``fresh`` (the final flush: node ids then follow the core's order, whatever the flushes'
    timing was; monitor.snapshot_tree passes it with the JAX layer too). A session that
    compiled, or ran compiled code (``placement.needed``), goes through torch.compile's
    placement, extended the same way.

    A snapshot holds only the contexts that carry a metric (and their ancestors), numbered
    densely; its last part gives each one's id in the core, which stays the same from one
    snapshot to the next."""

    def __init__(self) -> None:
        self._frames: dict[tuple, Frame] = {}  # the core's frame rows, made once
        self._tree: CallingContextTree | None = None
        self._mapped: dict[int, int] = {}  # the core's node id -> the tree's
        self._placer: placement.Placer | None = None  # torch.compile's placement, with its tree

    def build(self, raw: Any, metadata: dict[str, Any], fresh: bool = True) -> CallingContextTree:
        nodes, frames, metric_names, metrics, ids = raw
        made = [self._frame(row) for row in frames]
        # torch.compile ran in this session, or its code (compiled before it, maybe before any
        # session): kernels under their source lines, generated frames tagged
        if placement.needed(inductor.snapshot_state(), made):
            self._tree = None
            return self._build_placed(raw, made, metadata, fresh)
        self._placer = None
        tree, mapped = self._tree_to_extend(ids, fresh)
        extended = tree is self._tree
        here = [0] * len(nodes)  # the snapshot's node -> the tree's
        for i in range(1, len(nodes)):
            at = mapped.get(ids[i])
            if at is None:
                parent, fid = nodes[i]
                frame = made[fid]
                p = here[parent]  # (a parent's id is below its child's: placed already)
                at = mapped[ids[i]] = p if _folds(frame, p == 0) else tree.child(p, frame)
            here[i] = at  # (folds: the caller's)
        tree.metadata = dict(metadata)
        # (tree.add_metric's work, in line: thousands a flush, into a tree nothing has read yet)
        placed = tree.nodes
        for node, mid, value in metrics:
            m = placed[here[node]].metrics
            name = metric_names[mid]
            m[name] = m.get(name, 0.0) + value
        marker = tree.existing_child(0, NO_FRAME) if extended and not tree.root.metrics else None
        if marker is not None and marker not in here:  # (the core has a node of that name too)
            # the time that folded onto the root went (a warm-up rolled back): no marker for it
            return self.build(raw, metadata, fresh=True)
        self._tree, self._mapped = tree, mapped
        return _off_the_root(tree)

    def _build_placed(self, raw: Any, made: list[Frame], metadata: dict[str, Any],
                      fresh: bool) -> CallingContextTree:
        """The tree through torch.compile's placement: the last one extended like a plain
        build's (its placements kept, contexts new since placed, every metric set anew) where
        every context placed before is still in the snapshot, else a new one."""
        nodes, _, metric_names, metrics, ids = raw
        placer = self._placer
        extended = not fresh and placer is not None and placer.known.keys() <= set(ids)
        if extended:
            placer.tree.clear_metrics()
        else:
            placer = placement.Placer(inductor.snapshot_state(), CallingContextTree())
            self._placer = placer
        tree = placer.tree
        tree.metadata = dict(metadata)
        placed = placer.build(nodes, made, _folds, ids)
        for node, mid, value in metrics:
            name = metric_names[mid]
            for nid, weight in placed[node]:
                tree.add_metric(nid, name, value * weight)
        marker = tree.existing_child(0, NO_FRAME) if extended and not tree.root.metrics else None
        if marker is not None and all(nid != marker for here in placed for nid, _ in here):
            # the time that folded onto the root went (a warm-up rolled back): no marker for it
            return self._build_placed(raw, made, metadata, fresh=True)
        compiles = placer.add_compiles(placed, {core: i for i, core in enumerate(ids)})
        placer.add_compile_host()
        state = placer.state
        tree.metadata["torch_compile"] = {
            "compiles": compiles,
            "graph_breaks": list(state.graph_breaks),
            "fx_graph_cache": dict(state.fx_cache),
            "kernel_calls": len(placer.mapped_calls) + len(placer.unmapped_calls),
            "kernel_calls_without_provenance": len(placer.unmapped_calls),
        }
        return _off_the_root(tree)

    def _frame(self, row: tuple) -> Frame:
        frame = self._frames.get(row)
        if frame is None:
            kind, name, file, line, extra = row
            frame = self._frames[row] = Frame.make(kind, name, file, line, **_parse_extra(extra))
        return frame

    def _tree_to_extend(self, ids: list[int],
                        fresh: bool) -> tuple[CallingContextTree, dict[int, int]]:
        """The last tree with its metrics cleared, where a whole build would give every context
        in it again (each still in the snapshot; build checks the marker); else a new one."""
        tree, mapped = self._tree, self._mapped
        if fresh or tree is None or not mapped.keys() <= set(ids):
            return CallingContextTree(), {ids[0]: 0} if ids else {}
        tree.clear_metrics()
        return tree, mapped
