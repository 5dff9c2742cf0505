"""The calling context tree: an index arena of nodes, each one frame under its parent.

Node ids are indices into ``nodes``; the same ids are used by the file format, the analyzer and
the viewer. Metrics are exclusive per node; inclusive values are subtree sums computed on read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .frame import ROOT_FRAME, Frame
from .metrics import DEFAULT_METRIC_ORDER


@dataclass(slots=True)
class Node:
    id: int
    parent: int  # -1 for the root
    frame: Frame
    metrics: dict[str, float] = field(default_factory=dict)
    children: list[int] = field(default_factory=list)


class CallingContextTree:
    """Nodes in a list, children found through a ``(parent, frame) -> id`` index."""

    def __init__(self, metadata: dict[str, Any] | None = None) -> None:
        self.nodes: list[Node] = [Node(0, -1, ROOT_FRAME)]
        self._index: dict[tuple[int, Frame], int] = {}
        self.metadata: dict[str, Any] = dict(metadata or {})
        self._inclusive_cache: dict[str | tuple[str, int], list[float]] = {}
        #: A multi-rank profile also keeps each rank's own exclusive values:
        #: rank -> node -> metric -> value (``metrics`` hold their sum). Empty otherwise.
        self.rank_metrics: dict[int, dict[int, dict[str, float]]] = {}

    # -- building -------------------------------------------------------------------------
    @property
    def root(self) -> Node:
        return self.nodes[0]

    def child(self, parent: int, frame: Frame) -> int:
        """The id of ``frame`` under ``parent``, created if new."""
        key = (parent, frame)
        nid = self._index.get(key)
        if nid is None:
            nid = len(self.nodes)
            self.nodes.append(Node(nid, parent, frame))
            self.nodes[parent].children.append(nid)
            self._index[key] = nid
            self._inclusive_cache.clear()
        return nid

    def existing_child(self, parent: int, frame: Frame) -> int | None:
        """The id of ``frame`` under ``parent``, or None (nothing is created)."""
        return self._index.get((parent, frame))

    def clear_metrics(self) -> None:
        """Every node's metrics gone, the nodes kept (a tree refilled from newer counts)."""
        for n in self.nodes:
            n.metrics.clear()
        self.rank_metrics.clear()
        self._inclusive_cache.clear()

    def add_path(self, frames: Iterable[Frame], parent: int = 0) -> int:
        """Intern a call path (outermost first) and return its leaf id."""
        nid = parent
        for frame in frames:
            nid = self.child(nid, frame)
        return nid

    def add_metric(self, node: int, metric: str, value: float) -> None:
        m = self.nodes[node].metrics
        m[metric] = m.get(metric, 0.0) + value
        self._inclusive_cache.pop(metric, None)

    def add_rank_metric(self, rank: int, node: int, metric: str, value: float) -> None:
        m = self.rank_metrics.setdefault(rank, {}).setdefault(node, {})
        m[metric] = m.get(metric, 0.0) + value
        self._inclusive_cache.pop((metric, rank), None)

    def add_values_of(self, other: CallingContextTree, node: int, into: int) -> None:
        """Add ``other``'s values of ``node`` to this tree's node ``into``: their sums and each
        rank's own (views of a merged job keep the ranks apart)."""
        for metric, value in other.nodes[node].metrics.items():
            self.add_metric(into, metric, value)
        for r, table in other.rank_metrics.items():
            for metric, value in table.get(node, {}).items():
                self.add_rank_metric(r, into, metric, value)

    def merge(self, other: CallingContextTree, parent: int = 0, rank: int | None = None) -> None:
        """Add ``other``'s nodes and metrics into this tree (matching contexts by frames).
        With ``rank``, ``other``'s values are also kept as that rank's own; per-rank values
        ``other`` already holds (a merged job) are carried over either way."""
        mapping = {0: parent}
        for node in other.nodes:
            if node.id == 0:
                nid = parent
            else:
                nid = self.child(mapping[node.parent], node.frame)
            mapping[node.id] = nid
            for metric, value in node.metrics.items():
                self.add_metric(nid, metric, value)
                if rank is not None:
                    self.add_rank_metric(rank, nid, metric, value)
        for r, table in other.rank_metrics.items():
            for onid, values in table.items():
                for metric, value in values.items():
                    self.add_rank_metric(r, mapping[onid], metric, value)

    # -- reading --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    def path(self, node: int) -> list[Frame]:
        """The frames from the root's child down to ``node``."""
        frames = []
        while node > 0:
            n = self.nodes[node]
            frames.append(n.frame)
            node = n.parent
        return frames[::-1]

    def path_ids(self, node: int) -> list[int]:
        ids = []
        while node > 0:
            ids.append(node)
            node = self.nodes[node].parent
        return ids[::-1]

    def metric_names(self) -> list[str]:
        names: set[str] = set()
        for n in self.nodes:
            names.update(n.metrics)
        return sorted(names)

    def default_metric(self) -> str:
        names = self.metric_names()
        for m in DEFAULT_METRIC_ORDER:
            if m in names and self.total(m) > 0:
                return m
        return names[0] if names else "cpu.time"

    def exclusive(self, node: int, metric: str) -> float:
        return self.nodes[node].metrics.get(metric, 0.0)

    def inclusive_all(self, metric: str) -> list[float]:
        """Inclusive values of ``metric`` for every node (children always follow parents)."""
        cached = self._inclusive_cache.get(metric)
        if cached is not None:
            return cached
        inc = [n.metrics.get(metric, 0.0) for n in self.nodes]
        for n in reversed(self.nodes):
            if n.parent >= 0:
                inc[n.parent] += inc[n.id]
        self._inclusive_cache[metric] = inc
        return inc

    def inclusive(self, node: int, metric: str) -> float:
        return self.inclusive_all(metric)[node]

    def total(self, metric: str) -> float:
        return sum(n.metrics.get(metric, 0.0) for n in self.nodes)

    # -- per-rank values (multi-rank profiles) ----------------------------------------------
    def ranks(self) -> list[int]:
        """The ranks whose own values this profile keeps (empty for a single process)."""
        return sorted(self.rank_metrics)

    def rank_exclusive(self, node: int, metric: str, rank: int) -> float:
        return self.rank_metrics.get(rank, {}).get(node, {}).get(metric, 0.0)

    def rank_inclusive_all(self, metric: str, rank: int) -> list[float]:
        """Inclusive values of ``metric`` on ``rank`` for every node."""
        cached = self._inclusive_cache.get((metric, rank))
        if cached is not None:
            return cached
        inc = [0.0] * len(self.nodes)
        for nid, values in self.rank_metrics.get(rank, {}).items():
            inc[nid] = values.get(metric, 0.0)
        for n in reversed(self.nodes):
            if n.parent >= 0:
                inc[n.parent] += inc[n.id]
        self._inclusive_cache[(metric, rank)] = inc
        return inc

    def rank_view(self, rank: int) -> CallingContextTree:
        """One rank's profile: the same nodes (same ids) with only that rank's values."""
        if rank not in self.rank_metrics:
            raise KeyError(rank)
        view = CallingContextTree({**self.metadata, "rank": rank})
        view.nodes = [Node(n.id, n.parent, n.frame, {}, list(n.children)) for n in self.nodes]
        view._index = dict(self._index)
        for nid, values in self.rank_metrics[rank].items():
            view.nodes[nid].metrics = dict(values)
        return view

    def walk(self, node: int = 0) -> Iterator[Node]:
        """Depth-first, parents before children, children in insertion order."""
        stack = [node]
        while stack:
            n = self.nodes[stack.pop()]
            yield n
            stack.extend(reversed(n.children))

    def find(self, predicate: Any) -> list[Node]:
        return [n for n in self.nodes if predicate(n)]

    def self_check(self) -> None:
        """Assert the arena's invariants (used by tests and the file reader)."""
        seen: set[tuple[int, Frame]] = set()
        for n in self.nodes:
            if n.id == 0:
                assert n.parent == -1
                continue
            assert 0 <= n.parent < n.id, f"node {n.id} has parent {n.parent}"
            assert n.id in self.nodes[n.parent].children
            key = (n.parent, n.frame)
            assert key not in seen, f"duplicate child {n.frame} under {n.parent}"
            seen.add(key)
